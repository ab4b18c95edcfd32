package franz_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A missing dead-letter topic of a publisher bound to the consumer's client
// (WithPublisher) is logged at Warn within seconds of the start and
// reported by Health until it is created. (The start checks every adapter
// makes are in kafkatest.Run.)
func TestStartCheckOfABoundPublisher(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	var buf kafkatest.LogBuffer
	pub := new(franz.Publisher)
	dl, err := stream.DeadLetter(pub, "t.dlq")
	if err != nil {
		t.Fatal(err)
	}
	proc := newProcessor(t, streamtest.Succeed, stream.WithExhaustionAction(dl))
	r := start(t, addrs, "g", "t", proc, franz.WithPublisher(pub), franz.WithLogger(buf.Logger()))
	buf.WaitFor(t, `level=WARN msg="redeliver: a dead-letter topic is not there`, 5*time.Second)
	if err := r.C.Health(); err == nil || !strings.Contains(err.Error(), `dead-letter topic "t.dlq"`) || !strings.Contains(err.Error(), "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Errorf("Health: %v, want it to name the dead-letter topic and what the broker said", err)
	}
	kafkatest.CreateTopics(t, addrs, "t.dlq")
	for deadline := time.Now().Add(10 * time.Second); r.C.Health() != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Health still says %v after the topic was created", r.C.Health())
		}
	}
	buf.WaitFor(t, "start check passes now", time.Second)
	var zero franz.Consumer
	if err := zero.Health(); err == nil {
		t.Error("Health of a zero Consumer returned nil")
	}
}
