package eventhubs

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/stream"
)

// ErrOwnershipLost is returned by [CheckpointStore.SetCheckpoint], and is
// the cause a claim is cancelled with, when the partition is owned by
// another processor (or by nobody, or its ownership expired). It matches
// [stream.ErrRevoked].
var ErrOwnershipLost = fmt.Errorf("eventhubs: partition ownership lost: %w", stream.ErrRevoked)

// StateGroupSuffix is appended to a consumer group's name to name where
// the retry state of its withheld batches is kept: one checkpoint record
// per partition in the same store, under the consumer group
// "<group>/redeliver", whose SequenceNumber is the position the state
// applies to and whose Offset is "redeliver:" followed by the state. Event
// Hubs consumer group names cannot hold a slash, so no real group's
// checkpoints are touched, and the SDK's blob store keeps the record in a
// blob of its own ("<namespace>/<hub>/<group>/redeliver/checkpoint/<id>").
const StateGroupSuffix = "/redeliver"

const statePrefix = "redeliver:"

// PositionOffset is the offset of a positional checkpoint: a checkpoint
// that names where a partition's next owner must start, the sequence
// number after its SequenceNumber, when the adapter holds no event to
// name it by (the SDK's UpdateCheckpoint takes an event). The adapter
// writes one when it opens a partition that has no checkpoint, before the
// first batch is delivered, and when a batch is withheld at an event whose
// previous one it does not hold (the batch's first, or the first after
// events expired by the hub's retention). "-1" is the
// offset the SDK itself gives its earliest start position: a reader of
// the checkpoint store that does not know positional checkpoints starts
// at the partition's earliest event (it sees events again, it misses
// none), while [CheckpointStore.ListCheckpoints] gives the processor the
// checkpoint by sequence number, so that it starts exactly after it.
const PositionOffset = "-1"

// DefaultPartitionExpiration is the SDK Processor's default
// PartitionExpirationDuration: an ownership not renewed for this long is
// free for any processor to claim.
const DefaultPartitionExpiration = 60 * time.Second

// StoreOptions configures a [CheckpointStore]. The zero value means the
// defaults.
type StoreOptions struct {
	// PartitionExpirationDuration is the processor's: an ownership older
	// than this is treated as lost. The default is
	// [DefaultPartitionExpiration]. Blob storage keeps modification times
	// in whole seconds, so it must exceed the processor's UpdateInterval
	// (x1.3, its jitter) by more than a second, as it must for the SDK's
	// own load balancing.
	PartitionExpirationDuration time.Duration
}

// CheckpointStore wraps an [azeventhubs.CheckpointStore] (the SDK's blob
// store, say) for one processor, and is the store that processor is given.
// It adds the two things the adapter needs and the SDK's stores lack:
//
//   - A fence. The SDK's blob store claims ownership by ETag but writes a
//     checkpoint unconditionally, so a processor whose partition was stolen
//     can still move the new owner's checkpoint. SetCheckpoint here first
//     renews the partition's ownership with the ETag this processor holds
//     (a conditional write, which fails once another processor has claimed
//     the partition, and makes a steal based on an earlier read fail) and
//     refuses, with [ErrOwnershipLost], unless it succeeds for this
//     processor (ownerID) with an unexpired ownership; and a claim whose
//     ownership was seen lost can write nothing more, even if this
//     processor owns the partition again later. Any
//     ownership this store sees going to another owner (in the processor's
//     own ListOwnership and ClaimOwnership calls) cancels the claims on
//     that partition at once, also while they wait out a backoff.
//   - Retry state that a checkpoint write cannot wipe. The SDK's Checkpoint
//     has no free-form field, and the blob store's metadata write replaces
//     every key, so the retry state of a withheld batch is kept in a record
//     of its own beside the checkpoint (see [StateGroupSuffix]). It applies
//     only while the checkpoint stays just before its position: a plain
//     checkpoint write past the batch makes it stale, and a new owner reads
//     it and continues the count.
//
// The fence narrows the stale-owner window to the time between the
// renewal and the write: a processor that reads the ownership after the
// renewal, steals the partition and starts from the checkpoint before the
// write lands is not seen. Storage offers no conditional write across two
// blobs to close it. Each checkpoint write so costs one more storage write
// (the renewal), which also keeps the ownership fresh.
//
// One CheckpointStore serves one processor. It is safe for concurrent use.
// Build it with [NewCheckpointStore]: the methods of the zero
// CheckpointStore return an error.
type CheckpointStore struct {
	inner  azeventhubs.CheckpointStore
	owner  string
	expiry time.Duration
	now    func() time.Time

	mu     sync.Mutex
	hub    hubKey                                       // the consumer group the processor last named
	listed map[hubKey]map[string]azeventhubs.Checkpoint // the last ListCheckpoints answer
	gates  map[partKey]map[*gate]struct{}               // live claims
	etags  map[partKey]*azcore.ETag                     // of our ownership records, as last seen
}

// hubKey names a consumer group of an event hub.
type hubKey struct{ ns, hub, group string }

// partKey names a partition of a consumer group.
type partKey struct {
	hubKey
	id string
}

func (k partKey) String() string { return k.ns + "/" + k.hub + "/" + k.group + "/" + k.id }

// gate is one claim's permission to write: closed for good once the
// claim's ownership is seen lost.
type gate struct {
	key    partKey
	lost   bool
	cancel context.CancelCauseFunc
}

type gateCtxKey struct{}

// NewCheckpointStore wraps inner for the processor whose owner ID (the
// ConsumerClient's InstanceID) is ownerID. opts may be nil.
func NewCheckpointStore(inner azeventhubs.CheckpointStore, ownerID string, opts *StoreOptions) (*CheckpointStore, error) {
	if isNil(inner) {
		return nil, fmt.Errorf("eventhubs: nil checkpoint store to wrap (%T)", inner)
	}
	if ownerID == "" {
		return nil, errors.New("eventhubs: empty owner ID for the checkpoint store (the ConsumerClient's InstanceID)")
	}
	s := &CheckpointStore{inner: inner, owner: ownerID, expiry: DefaultPartitionExpiration, now: time.Now,
		listed: map[hubKey]map[string]azeventhubs.Checkpoint{}, gates: map[partKey]map[*gate]struct{}{},
		etags: map[partKey]*azcore.ETag{}}
	if opts != nil && opts.PartitionExpirationDuration != 0 {
		if opts.PartitionExpirationDuration < 0 {
			return nil, fmt.Errorf("eventhubs: negative PartitionExpirationDuration %v", opts.PartitionExpirationDuration)
		}
		s.expiry = opts.PartitionExpirationDuration
	}
	return s, nil
}

// errZeroStore is what the methods of a CheckpointStore that was not built
// return.
var errZeroStore = errors.New("eventhubs: zero CheckpointStore: build it with eventhubs.NewCheckpointStore")

// built returns errZeroStore unless s was built by NewCheckpointStore.
func (s *CheckpointStore) built() error {
	if s == nil || s.inner == nil {
		return errZeroStore
	}
	return nil
}

// OwnerID returns the owner ID the store fences for ("" for the zero
// CheckpointStore).
func (s *CheckpointStore) OwnerID() string {
	if s == nil {
		return ""
	}
	return s.owner
}

// ClaimOwnership claims through the wrapped store. A partition this
// processor has a live claim on that it asked to renew and did not get was
// taken by another processor: its claims are cancelled.
func (s *CheckpointStore) ClaimOwnership(ctx context.Context, req []azeventhubs.Ownership, options *azeventhubs.ClaimOwnershipOptions) ([]azeventhubs.Ownership, error) {
	if err := s.built(); err != nil {
		return nil, err
	}
	for _, o := range req {
		s.seen(ownershipKey(o).hubKey)
	}
	got, err := s.inner.ClaimOwnership(ctx, req, options)
	if err != nil {
		return nil, err
	}
	ok := make(map[partKey]bool, len(got))
	for _, o := range got {
		k := ownershipKey(o)
		ok[k] = o.OwnerID == s.owner
		if ok[k] {
			s.setETag(k, o)
		}
	}
	for _, o := range req {
		k := ownershipKey(o)
		if ok[k] || !s.live(k) {
			continue
		}
		// Our own fence may have renewed the record between the
		// processor's read and its claim: lost only if not ours now.
		if cur, err := s.read(ctx, k); err == nil && s.notOurs(cur) == "" {
			continue
		}
		s.lose(k, fmt.Errorf("%w: %s: renewal refused (claimed by another processor)", ErrOwnershipLost, k))
	}
	return got, nil
}

// ListOwnership lists through the wrapped store. A partition this
// processor has a live claim on that another owner holds, or whose
// ownership expired, is lost: its claims are cancelled.
func (s *CheckpointStore) ListOwnership(ctx context.Context, ns, hub, group string, options *azeventhubs.ListOwnershipOptions) ([]azeventhubs.Ownership, error) {
	if err := s.built(); err != nil {
		return nil, err
	}
	s.seen(hubKey{ns, hub, group})
	os, err := s.inner.ListOwnership(ctx, ns, hub, group, options)
	if err != nil {
		return nil, err
	}
	for _, o := range os {
		k := ownershipKey(o)
		if why := s.notOurs(o); why != "" {
			s.lose(k, fmt.Errorf("%w: %s: %s", ErrOwnershipLost, k, why))
		} else {
			s.setETag(k, o)
		}
	}
	return os, nil
}

// ListCheckpoints lists through the wrapped store, and remembers the
// answer: it is where the processor starts the partitions it opens next,
// and so what the adapter's claims report as committed. A positional
// checkpoint (see [PositionOffset]) of a sequence number n >= 0 is listed
// with no offset, so that the processor starts after n by sequence number.
func (s *CheckpointStore) ListCheckpoints(ctx context.Context, ns, hub, group string, options *azeventhubs.ListCheckpointsOptions) ([]azeventhubs.Checkpoint, error) {
	if err := s.built(); err != nil {
		return nil, err
	}
	cps, err := s.inner.ListCheckpoints(ctx, ns, hub, group, options)
	if err != nil {
		return nil, err
	}
	m := make(map[string]azeventhubs.Checkpoint, len(cps))
	for i, cp := range cps {
		if cp.Offset != nil && *cp.Offset == PositionOffset && cp.SequenceNumber != nil && *cp.SequenceNumber >= 0 {
			cp.Offset = nil
			cps[i] = cp
		}
		m[cp.PartitionID] = cp
	}
	s.mu.Lock()
	s.listed[hubKey{ns, hub, group}] = m
	s.mu.Unlock()
	return cps, nil
}

// SetCheckpoint writes cp through the wrapped store only if this processor
// owns the partition now (read from the store) and, when called by the
// adapter, the claim writing it has not been seen to lose it. Otherwise it
// returns an error matching [ErrOwnershipLost] and writes nothing.
func (s *CheckpointStore) SetCheckpoint(ctx context.Context, cp azeventhubs.Checkpoint, options *azeventhubs.SetCheckpointOptions) error {
	if err := s.built(); err != nil {
		return err
	}
	k := partKey{hubKey{cp.FullyQualifiedNamespace, cp.EventHubName, cp.ConsumerGroup}, cp.PartitionID}
	if err := s.verify(ctx, k); err != nil {
		return err
	}
	return s.inner.SetCheckpoint(ctx, cp, options)
}

// setState writes the retry state md for position next of the partition,
// fenced as SetCheckpoint is.
func (s *CheckpointStore) setState(ctx context.Context, k partKey, next int64, md string) error {
	if err := s.verify(ctx, k); err != nil {
		return err
	}
	off := statePrefix + md
	return s.inner.SetCheckpoint(ctx, azeventhubs.Checkpoint{
		FullyQualifiedNamespace: k.ns, EventHubName: k.hub, ConsumerGroup: k.group + StateGroupSuffix,
		PartitionID: k.id, SequenceNumber: &next, Offset: &off,
	}, nil)
}

// setPosition writes a positional checkpoint (see [PositionOffset]) at
// sequence number seq, fenced as SetCheckpoint is.
func (s *CheckpointStore) setPosition(ctx context.Context, k partKey, seq int64) error {
	if err := s.verify(ctx, k); err != nil {
		return err
	}
	off := PositionOffset
	return s.inner.SetCheckpoint(ctx, azeventhubs.Checkpoint{
		FullyQualifiedNamespace: k.ns, EventHubName: k.hub, ConsumerGroup: k.group,
		PartitionID: k.id, SequenceNumber: &seq, Offset: &off,
	}, nil)
}

// verify returns nil when this processor owns the partition now and the
// gate in ctx, if any, is open. It renews the ownership with the ETag this
// processor holds, a conditional write: a steal based on any earlier read
// of the ownership then fails, and a steal that already happened makes the
// renewal fail.
func (s *CheckpointStore) verify(ctx context.Context, k partKey) error {
	if err := s.gateErr(ctx, k); err != nil {
		return err
	}
	s.mu.Lock()
	etag := s.etags[k]
	s.mu.Unlock()
	for range 3 {
		if etag == nil {
			cur, err := s.read(ctx, k)
			if err != nil {
				return err
			}
			if why := s.notOurs(cur); why != "" {
				err := fmt.Errorf("%w: %s: %s", ErrOwnershipLost, k, why)
				s.lose(k, err)
				return err
			}
			etag = cur.ETag
		}
		got, err := s.inner.ClaimOwnership(ctx, []azeventhubs.Ownership{{FullyQualifiedNamespace: k.ns, EventHubName: k.hub,
			ConsumerGroup: k.group, PartitionID: k.id, OwnerID: s.owner, ETag: etag}}, nil)
		if err != nil {
			return fmt.Errorf("eventhubs: renew ownership of %s before a checkpoint: %w", k, err)
		}
		if len(got) == 1 {
			s.setETag(k, got[0])
			return s.gateErr(ctx, k)
		}
		etag = nil // changed since we read it: read it again
	}
	return fmt.Errorf("eventhubs: renew ownership of %s before a checkpoint: the record kept changing", k)
}

// relinquish hands back the partitions of the processor's consumer group
// that the store shows this processor owning, each conditional on the
// ETag read, and returns how many it handed back. It is for when the
// processor has stopped: the processor's own hand-back names the ETags of
// its last load-balancing round, which the fence's renewals have replaced
// since, so the store refuses it.
func (s *CheckpointStore) relinquish(ctx context.Context) (int, error) {
	s.mu.Lock()
	k := s.hub
	s.mu.Unlock()
	if k == (hubKey{}) {
		return 0, nil // the processor never named its consumer group
	}
	os, err := s.inner.ListOwnership(ctx, k.ns, k.hub, k.group, nil)
	if err != nil {
		return 0, fmt.Errorf("eventhubs: read ownership to hand it back: %w", err)
	}
	var req []azeventhubs.Ownership
	for _, o := range os {
		if o.OwnerID == s.owner {
			o.OwnerID = "" // relinquished: free at once for others, as the SDK's processor marks it
			req = append(req, o)
		}
	}
	if len(req) == 0 {
		return 0, nil
	}
	got, err := s.inner.ClaimOwnership(ctx, req, nil)
	if err != nil {
		return 0, fmt.Errorf("eventhubs: hand back ownership: %w", err)
	}
	return len(got), nil
}

// read returns the partition's ownership record as the store has it now.
func (s *CheckpointStore) read(ctx context.Context, k partKey) (azeventhubs.Ownership, error) {
	os, err := s.inner.ListOwnership(ctx, k.ns, k.hub, k.group, nil)
	if err != nil {
		return azeventhubs.Ownership{}, fmt.Errorf("eventhubs: read ownership of %s: %w", k, err)
	}
	for _, o := range os {
		if o.PartitionID == k.id {
			return o, nil
		}
	}
	return azeventhubs.Ownership{PartitionID: k.id}, nil // no record: nobody's
}

// gateErr returns ErrOwnershipLost when the claim writing (its gate in
// ctx) has seen its ownership lost.
func (s *CheckpointStore) gateErr(ctx context.Context, k partKey) error {
	g, _ := ctx.Value(gateCtxKey{}).(*gate)
	if g == nil {
		return nil
	}
	s.mu.Lock()
	lost := g.lost
	s.mu.Unlock()
	if lost {
		return fmt.Errorf("%w: %s: this claim lost it earlier", ErrOwnershipLost, k)
	}
	return nil
}

// setETag remembers the ETag of our own ownership record o.
func (s *CheckpointStore) setETag(k partKey, o azeventhubs.Ownership) {
	s.mu.Lock()
	s.etags[k] = o.ETag
	s.mu.Unlock()
}

// live reports whether a claim on k runs.
func (s *CheckpointStore) live(k partKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.gates[k]) > 0
}

// notOurs says why o is not a live ownership of this processor; "" if it
// is.
func (s *CheckpointStore) notOurs(o azeventhubs.Ownership) string {
	switch {
	case o.OwnerID == "":
		return "relinquished"
	case o.OwnerID != s.owner:
		return "owned by " + o.OwnerID
	case !o.LastModifiedTime.IsZero() && s.now().Sub(o.LastModifiedTime) > s.expiry:
		return fmt.Sprintf("ownership expired (last renewed %v ago, expiry %v)", s.now().Sub(o.LastModifiedTime).Round(time.Millisecond), s.expiry)
	}
	return ""
}

// seen records the consumer group the processor works on.
func (s *CheckpointStore) seen(k hubKey) {
	s.mu.Lock()
	s.hub = k
	s.mu.Unlock()
}

// keyOf names a partition of the consumer group the processor works on;
// false before the processor has named one.
func (s *CheckpointStore) keyOf(id string) (partKey, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return partKey{s.hub, id}, s.hub != hubKey{}
}

// register opens a gate for a new claim on k, cancelled with its cause
// when the partition is lost.
func (s *CheckpointStore) register(k partKey, cancel context.CancelCauseFunc) *gate {
	g := &gate{key: k, cancel: cancel}
	s.mu.Lock()
	if s.gates[k] == nil {
		s.gates[k] = map[*gate]struct{}{}
	}
	s.gates[k][g] = struct{}{}
	s.mu.Unlock()
	return g
}

func (s *CheckpointStore) unregister(g *gate) {
	s.mu.Lock()
	delete(s.gates[g.key], g)
	if len(s.gates[g.key]) == 0 {
		delete(s.gates, g.key)
	}
	s.mu.Unlock()
}

// lose closes the gates of every live claim on k and cancels them.
func (s *CheckpointStore) lose(k partKey, cause error) {
	s.mu.Lock()
	var cancels []context.CancelCauseFunc
	for g := range s.gates[k] {
		if !g.lost {
			g.lost = true
			cancels = append(cancels, g.cancel)
		}
	}
	s.mu.Unlock()
	for _, c := range cancels {
		c(cause)
	}
}

// lost reports whether g was closed.
func (s *CheckpointStore) lost(g *gate) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return g.lost
}

// start is where a new claim starts: its Position, whether the store has
// a checkpoint for the partition, and the position of the retry state
// record when it holds a state (-1 for none), applying or not.
type start struct {
	Position
	checkpointed bool
	stateAt      int64
}

// position returns where a new claim on k starts: the checkpoint the
// processor listed when it opened the partition (read again if it has not
// listed), and the state record.
func (s *CheckpointStore) position(ctx context.Context, k partKey) (start, error) {
	s.mu.Lock()
	m, ok := s.listed[k.hubKey]
	s.mu.Unlock()
	var cp *azeventhubs.Checkpoint
	if ok {
		if c, found := m[k.id]; found {
			cp = &c
		}
	} else {
		cps, err := s.inner.ListCheckpoints(ctx, k.ns, k.hub, k.group, nil)
		if err != nil {
			return start{}, fmt.Errorf("eventhubs: read checkpoint of %s: %w", k, err)
		}
		for i := range cps {
			if cps[i].PartitionID == k.id {
				cp = &cps[i]
			}
		}
	}
	sts, err := s.inner.ListCheckpoints(ctx, k.ns, k.hub, k.group+StateGroupSuffix, nil)
	if err != nil {
		return start{}, fmt.Errorf("eventhubs: read retry state of %s: %w", k, err)
	}
	var st *azeventhubs.Checkpoint
	for i := range sts {
		if sts[i].PartitionID == k.id {
			st = &sts[i]
		}
	}
	at := int64(-1)
	if st != nil && st.SequenceNumber != nil && st.Offset != nil && *st.Offset != statePrefix && strings.HasPrefix(*st.Offset, statePrefix) {
		at = *st.SequenceNumber
	}
	return start{Position: combine(cp, st), checkpointed: cp != nil && cp.SequenceNumber != nil, stateAt: at}, nil
}

// Position is where a partition's consumer group stands: the sequence
// number of the next event to handle (-1 when nothing was checkpointed),
// and the retry state of the batch withheld there ("" for none).
type Position struct {
	Next     int64
	Metadata string
}

// combine returns the position a checkpoint and a state record give.
func combine(cp, st *azeventhubs.Checkpoint) Position {
	p := Position{Next: -1}
	if cp != nil && cp.SequenceNumber != nil {
		p.Next = *cp.SequenceNumber + 1
	}
	if st == nil || st.SequenceNumber == nil || st.Offset == nil || !strings.HasPrefix(*st.Offset, statePrefix) {
		return p
	}
	// A state applies at the checkpoint's position; with no checkpoint
	// yet, at the start of the partition (a withheld first batch).
	if p.Next < 0 || *st.SequenceNumber == p.Next {
		p.Next = *st.SequenceNumber
		p.Metadata = strings.TrimPrefix(*st.Offset, statePrefix)
	}
	return p
}

// Committed returns the positions of a consumer group's partitions in
// store (the wrapped store, or any reader of the same storage), by
// partition ID: the checkpoint and the retry state this package keeps
// beside it. It is what `redeliver offsets` is for Kafka.
func Committed(ctx context.Context, store azeventhubs.CheckpointStore, ns, hub, group string) (map[string]Position, error) {
	if isNil(store) {
		return nil, fmt.Errorf("eventhubs: Committed: nil checkpoint store (%T)", store)
	}
	cps, err := store.ListCheckpoints(ctx, ns, hub, group, nil)
	if err != nil {
		return nil, fmt.Errorf("eventhubs: list checkpoints: %w", err)
	}
	sts, err := store.ListCheckpoints(ctx, ns, hub, group+StateGroupSuffix, nil)
	if err != nil {
		return nil, fmt.Errorf("eventhubs: list retry state: %w", err)
	}
	byID := map[string][2]*azeventhubs.Checkpoint{}
	for i := range cps {
		e := byID[cps[i].PartitionID]
		e[0] = &cps[i]
		byID[cps[i].PartitionID] = e
	}
	for i := range sts {
		e := byID[sts[i].PartitionID]
		e[1] = &sts[i]
		byID[sts[i].PartitionID] = e
	}
	out := make(map[string]Position, len(byID))
	for id, e := range byID {
		out[id] = combine(e[0], e[1])
	}
	return out, nil
}

func ownershipKey(o azeventhubs.Ownership) partKey {
	return partKey{hubKey{o.FullyQualifiedNamespace, o.EventHubName, o.ConsumerGroup}, o.PartitionID}
}

// isNil reports whether v is nil or holds a nil pointer, map, slice,
// channel or function.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
