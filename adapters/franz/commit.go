package franz

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errCommitterStopped answers a commit made after the committer stopped;
// workers have all ended by then, so it is never seen in practice.
var errCommitterStopped = errors.New("franz: consumer stopped")

// commitReq is one partition's commit, waiting for its answer on done.
type commitReq struct {
	key      tp
	at       kgo.EpochOffset
	metadata string
	done     chan error
}

// committer sends the commits of all partitions. franz-go runs one commit
// at a time per client, so commits of several partitions due at once are
// gathered into one synchronous OffsetCommit request: while one request is
// in flight, the next collects whatever is asked for meanwhile.
type committer struct {
	cl      *kgo.Client
	timeout time.Duration
	reqs    chan *commitReq
	quit    chan struct{}
	done    chan struct{}
}

func newCommitter(cl *kgo.Client, timeout time.Duration) *committer {
	return &committer{cl: cl, timeout: timeout, reqs: make(chan *commitReq), quit: make(chan struct{}), done: make(chan struct{})}
}

func (m *committer) start() { go m.loop() }

// stop ends the loop once no commit is waiting; call it after every worker
// has ended.
func (m *committer) stop() {
	close(m.quit)
	<-m.done
}

// commit commits at with metadata for key and waits for the answer.
func (m *committer) commit(key tp, at kgo.EpochOffset, metadata string) error {
	r := &commitReq{key: key, at: at, metadata: metadata, done: make(chan error, 1)}
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

	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			for j := range t.Partitions {
				p := &t.Partitions[j]
				if r := byKey[tp{t.Topic, p.Partition}]; r != nil {
					md := r.metadata
					p.Metadata = &md
				}
			}
		}
		return nil
	})
	answered := make(map[tp]bool, len(round))
	m.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			err = fmt.Errorf("franz: offset commit: %v", err)
			for _, r := range round {
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
