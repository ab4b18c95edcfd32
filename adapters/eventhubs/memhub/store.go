package memhub

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
)

// Store is an in-memory [azeventhubs.CheckpointStore] with the semantics
// of the SDK's blob store (checkpoints.BlobStore): an ownership claim is
// conditional on the ETag the claimer read (a claim with no ETag only
// creates), a failed claim is left out of the answer rather than returned
// as an error, every successful claim gets a new ETag and modification
// time, and a checkpoint write is NOT conditional: it overwrites whatever
// is there, whoever owns the partition. It is safe for concurrent use; the
// zero Store is empty and ready to use, as [NewStore]'s is.
type Store struct {
	mu          sync.Mutex
	etag        int64
	checkpoints map[key]azeventhubs.Checkpoint
	ownerships  map[key]azeventhubs.Ownership
	fault       func(op string, partitionID string) error
	writes      int
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{checkpoints: map[key]azeventhubs.Checkpoint{}, ownerships: map[key]azeventhubs.Ownership{}}
}

// Operation names given to a fault function.
const (
	OpClaimOwnership  = "ClaimOwnership"
	OpListOwnership   = "ListOwnership"
	OpListCheckpoints = "ListCheckpoints"
	OpSetCheckpoint   = "SetCheckpoint"
)

// SetFault makes every operation call fn first (with the partition ID for
// SetCheckpoint, "" otherwise); an error it returns is the operation's,
// and the operation does nothing. nil removes it.
func (s *Store) SetFault(fn func(op string, partitionID string) error) {
	s.mu.Lock()
	s.fault = fn
	s.mu.Unlock()
}

// CheckpointWrites returns how many SetCheckpoint calls succeeded.
func (s *Store) CheckpointWrites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// init makes the zero Store ready; s.mu is held.
func (s *Store) init() {
	if s.checkpoints == nil {
		s.checkpoints = map[key]azeventhubs.Checkpoint{}
		s.ownerships = map[key]azeventhubs.Ownership{}
	}
}

func (s *Store) failed(op, id string) error {
	s.init()
	if s.fault == nil {
		return nil
	}
	return s.fault(op, id)
}

// key names a partition of a consumer group; a group is matched exactly
// (the blob store's names keep "<group>" and "<group>/x" apart too).
type key struct{ ns, hub, group, id string }

// ClaimOwnership claims each ownership whose ETag matches the stored one
// (or, with no ETag, that does not exist yet), and returns those it
// claimed with their new ETags and times.
func (s *Store) ClaimOwnership(ctx context.Context, req []azeventhubs.Ownership, _ *azeventhubs.ClaimOwnershipOptions) ([]azeventhubs.Ownership, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failed(OpClaimOwnership, ""); err != nil {
		return nil, err
	}
	var out []azeventhubs.Ownership
	for _, o := range req {
		if o.FullyQualifiedNamespace == "" || o.EventHubName == "" || o.ConsumerGroup == "" || o.PartitionID == "" {
			return nil, fmt.Errorf("memhub: ownership with missing fields: %+v", o)
		}
		k := key{o.FullyQualifiedNamespace, o.EventHubName, o.ConsumerGroup, o.PartitionID}
		cur, exists := s.ownerships[k]
		switch {
		case o.ETag == nil && exists:
			continue // created by someone else first
		case o.ETag != nil && (!exists || *cur.ETag != *o.ETag):
			continue // changed since the claimer read it
		}
		s.etag++
		tag := azcore.ETag("memhub-" + strconv.FormatInt(s.etag, 10))
		o.ETag = &tag
		o.LastModifiedTime = time.Now().UTC()
		s.ownerships[k] = o
		out = append(out, o)
	}
	return out, nil
}

// ListOwnership returns the consumer group's ownerships.
func (s *Store) ListOwnership(ctx context.Context, ns, hub, group string, _ *azeventhubs.ListOwnershipOptions) ([]azeventhubs.Ownership, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failed(OpListOwnership, ""); err != nil {
		return nil, err
	}
	var out []azeventhubs.Ownership
	for k, o := range s.ownerships {
		if k.ns == ns && k.hub == hub && k.group == group {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PartitionID < out[j].PartitionID })
	return out, nil
}

// ListCheckpoints returns the consumer group's checkpoints.
func (s *Store) ListCheckpoints(ctx context.Context, ns, hub, group string, _ *azeventhubs.ListCheckpointsOptions) ([]azeventhubs.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failed(OpListCheckpoints, ""); err != nil {
		return nil, err
	}
	var out []azeventhubs.Checkpoint
	for k, c := range s.checkpoints {
		if k.ns == ns && k.hub == hub && k.group == group {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PartitionID < out[j].PartitionID })
	return out, nil
}

// SetCheckpoint writes cp, unconditionally, as the SDK's blob store does.
func (s *Store) SetCheckpoint(ctx context.Context, cp azeventhubs.Checkpoint, _ *azeventhubs.SetCheckpointOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failed(OpSetCheckpoint, cp.PartitionID); err != nil {
		return err
	}
	if cp.FullyQualifiedNamespace == "" || cp.EventHubName == "" || cp.ConsumerGroup == "" || cp.PartitionID == "" {
		return fmt.Errorf("memhub: checkpoint with missing fields: %+v", cp)
	}
	if cp.SequenceNumber == nil || cp.Offset == nil {
		return fmt.Errorf("memhub: checkpoint of partition %s without a sequence number or offset", cp.PartitionID)
	}
	c := cp
	seq, off := *cp.SequenceNumber, *cp.Offset
	c.SequenceNumber, c.Offset = &seq, &off
	s.checkpoints[key{cp.FullyQualifiedNamespace, cp.EventHubName, cp.ConsumerGroup, cp.PartitionID}] = c
	s.writes++
	return nil
}

// Expire backdates an ownership's modification time by d, as if its owner
// had not renewed it for that long.
func (s *Store) Expire(ns, hub, group, id string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{ns, hub, group, id}
	if o, ok := s.ownerships[k]; ok {
		o.LastModifiedTime = o.LastModifiedTime.Add(-d)
		s.ownerships[k] = o
	}
}
