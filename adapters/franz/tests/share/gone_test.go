package share_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// The chaos run's share-consumer violation (issue 51): the record's
// partition changed leader while its dead letter was being written, the
// new leader handed it to another member, and this consumer went on to
// write the dead letter and send its REJECT. Here the broker refuses the
// renewal of a record whose exhaustion action runs, with
// INVALID_RECORD_STATE (what a leader that does not know the acquisition
// answers): the lease ends at that first refusal, and the action is
// cancelled then; before the fix the consumer kept renewing, every tenth
// of the lock, and acting on the record until its old deadline.
func TestRenewalRefusedForAGoneRecordCancelsItsAction(t *testing.T) {
	const topic, group = "orders", "g"
	c, addrs := kafkatest.NewCluster(t, topic, 1, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "4000",
		"share.record.lock.sweep.interval.ms": "50",
		"group.share.heartbeat.interval.ms":   "100",
	}))
	var renewals atomic.Int32
	c.ControlKey(kmsg.ShareAcknowledge.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.ShareAcknowledgeRequest)
		if !req.IsRenewAck {
			return nil, nil, false
		}
		renewals.Add(1)
		resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewShareAcknowledgeResponseTopic()
			st.TopicID = rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewShareAcknowledgeResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.InvalidRecordState.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	kafkatest.Produce(t, addrs, topic, 0, 0, 1)

	cancelled := make(chan int32, 8)
	proc, err := stream.NewProcessor(stream.PerRecord(func(context.Context, *stream.Record) error {
		return errors.New("poison")
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 0}),
		stream.WithExhaustionAction(func(ctx context.Context, _ *stream.Batch, _ *checkpoint.ExhaustedError) error {
			<-ctx.Done() // a dead letter that does not get through
			cancelled <- renewals.Load()
			return ctx.Err()
		}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, addrs, group, topic, proc, share.WithLanes(1))
	select {
	case n := <-cancelled:
		if n != 1 {
			t.Fatalf("the exhaustion action was cancelled after %d refused renewals, want at the first: a refused renewal of a record the broker does not hold for this consumer ends its lease", n)
		}
	case <-time.After(wait):
		t.Fatal("the exhaustion action was never cancelled")
	}
}
