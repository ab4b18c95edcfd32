package tests

import (
	"strings"
	"testing"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
)

// A nil *kafkago.Publisher is refused where it is given.
func TestDeadLetterRefusesNilPublisher(t *testing.T) {
	var pub *kafkago.Publisher
	if _, err := stream.DeadLetter(pub, "dlq"); err == nil || !strings.Contains(err.Error(), "nil *kafkago.Publisher") {
		t.Fatalf("DeadLetter with a nil *kafkago.Publisher: %v", err)
	}
}
