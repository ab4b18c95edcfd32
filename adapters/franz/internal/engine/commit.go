package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/internal/lifecycle"
)

// errCommitterStopped answers a commit made after the committer stopped;
// workers have all ended by then, so it is never seen in practice.
var errCommitterStopped = errors.New("franz: consumer stopped")

// errUnconfirmed answers a partition left out of a commit because the
// request would have gone out under a group session its claim is not
// confirmed in (see claim.confirmedFor); claim.Commit waits and retries.
var errUnconfirmed = errors.New("franz: the partition's assignment in the group's new session is not known yet")

// commitReq is one partition's commit, waiting for its answer on done.
type commitReq struct {
	cl       *claim
	key      tp
	at       kgo.EpochOffset
	metadata string
	last     bool // the claim's last commit, made by its revocation (see claim.revoke)
	done     chan error
}

// committer sends the commits of all partitions. franz-go runs one commit
// at a time per client, so commits of several partitions due at once are
// gathered into one synchronous OffsetCommit request: while one request is
// in flight, the next collects whatever is asked for meanwhile.
type committer struct {
	ctx     context.Context // done commitGrace after Run's: a shutdown cuts a commit in flight short
	cancel  context.CancelFunc
	cl      *kgo.Client
	timeout time.Duration
	kip848  bool // the client asks for KIP-848 groups (see claim.confirmedFor)
	reqs    chan *commitReq
	quit    chan struct{}
	done    chan struct{}
}

func newCommitter(cl *kgo.Client, timeout time.Duration) *committer {
	kip848, _ := cl.OptValue(kgo.ServerSideBalancer).(bool)
	return &committer{cl: cl, timeout: timeout, kip848: kip848, reqs: make(chan *commitReq), quit: make(chan struct{}), done: make(chan struct{})}
}

// commitGrace is how long a shutdown waits for a commit in flight before it
// cuts it short: the broker may have written it already, and its answer
// tells the worker so (its Checkpointed hook fires).
const commitGrace = 250 * time.Millisecond

// start starts the loop; ctx is Run's context.
func (m *committer) start(ctx context.Context) {
	m.ctx, m.cancel = lifecycle.Linger(ctx, commitGrace)
	go m.loop()
}

// stop ends the loop once no commit is waiting; call it after every worker
// has ended.
func (m *committer) stop() {
	close(m.quit)
	<-m.done
	if m.cancel != nil {
		m.cancel()
	}
}

// commit commits at with metadata for cl's partition and waits for the
// answer: errUnconfirmed when the request went out under a group session
// cl is not confirmed in, so that the partition was left out of it.
func (m *committer) commit(cl *claim, at kgo.EpochOffset, metadata string) error {
	return m.commitAs(cl, at, metadata, false)
}

// commitAs is commit; last marks the claim's last commit, made by its
// revocation, which may go out under a later generation of the same
// member (see claim.revoke).
func (m *committer) commitAs(cl *claim, at kgo.EpochOffset, metadata string, last bool) error {
	r := &commitReq{cl: cl, key: cl.key, at: at, metadata: metadata, last: last, done: make(chan error, 1)}
	select {
	case m.reqs <- r:
	case <-m.quit:
		return errCommitterStopped
	}
	return <-r.done
}

func (m *committer) loop() {
	defer close(m.done)
	var round, next []*commitReq
	for {
		if len(next) == 0 {
			select {
			case r := <-m.reqs:
				next = append(next, r)
			case <-m.quit:
				return
			}
		}
		round, next = next, round[:0]
	gather:
		for {
			select {
			case r := <-m.reqs:
				round = append(round, r)
			default:
				break gather
			}
		}
		round, next = m.send(round, next)
		clear(round)
		round = round[:0]
	}
}

// send commits one request for round, leaving for the next round any
// partition named twice, and returns round and next.
func (m *committer) send(round, next []*commitReq) ([]*commitReq, []*commitReq) {
	offsets := make(map[string]map[int32]kgo.EpochOffset, 1)
	byKey := make(map[tp]*commitReq, len(round))
	kept := round[:0]
	for _, r := range round {
		if _, dup := byKey[r.key]; dup {
			next = append(next, r)
			continue
		}
		byKey[r.key] = r
		kept = append(kept, r)
		ps := offsets[r.key.topic]
		if ps == nil {
			ps = make(map[int32]kgo.EpochOffset)
			offsets[r.key.topic] = ps
		}
		ps[r.key.partition] = r.at
	}
	round = kept

	// A revocation's last commit writes a success commit the Processor
	// has reported written already: a shutdown does not cut it short
	// after commitGrace (it can wait that long behind a rebalance's
	// JoinGroup and SyncGroup, during which franz-go holds commits), only
	// the commit timeout bounds it.
	base := m.ctx
	for _, r := range round {
		if r.last {
			base = context.WithoutCancel(m.ctx)
			break
		}
	}
	ctx, cancel := context.WithTimeout(base, m.timeout)
	defer cancel()
	answered := make(map[tp]bool, len(round))
	// The request's member ID and generation are those of the client's
	// group session when franz-go builds it, which can be a session newer
	// than the one a claim was confirmed in: those partitions are left
	// out of the request and answered errUnconfirmed.
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		topics := req.Topics[:0]
		for _, t := range req.Topics {
			parts := t.Partitions[:0]
			for _, p := range t.Partitions {
				key := tp{t.Topic, p.Partition}
				r := byKey[key]
				if r == nil {
					parts = append(parts, p)
					continue
				}
				if r.cl != nil && !r.cl.confirmedFor(req.MemberID, req.Generation, m.kip848) && !(r.last && r.cl.revokedIn(req.MemberID, req.Generation)) {
					r.done <- errUnconfirmed
					answered[key] = true
					continue
				}
				md := r.metadata
				p.Metadata = &md
				parts = append(parts, p)
			}
			if len(parts) > 0 {
				t.Partitions = parts
				topics = append(topics, t)
			}
		}
		clear(req.Topics[len(topics):])
		req.Topics = topics
		return nil
	})
	m.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			err = fmt.Errorf("franz: offset commit: %v", err)
			for _, r := range round {
				if answered[r.key] {
					continue
				}
				r.done <- err
				answered[r.key] = true
			}
			return
		}
		names := make(map[[16]byte]string, len(req.Topics))
		for _, t := range req.Topics {
			names[t.TopicID] = t.Topic
		}
		for _, t := range resp.Topics {
			topic := t.Topic
			if topic == "" {
				topic = names[t.TopicID]
			}
			for _, p := range t.Partitions {
				key := tp{topic, p.Partition}
				r := byKey[key]
				if r == nil || answered[key] {
					continue
				}
				answered[key] = true
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					r.done <- fmt.Errorf("franz: commit of %s/%d at offset %d: %v", key.topic, key.partition, r.at.Offset, perr)
					continue
				}
				r.done <- nil
			}
		}
	})
	for _, r := range round {
		if !answered[r.key] {
			r.done <- fmt.Errorf("franz: commit of %s/%d at offset %d: no answer for the partition", r.key.topic, r.key.partition, r.at.Offset)
		}
	}
	return round, next
}
