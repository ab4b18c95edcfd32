package redrive_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
)

func TestStateNames(t *testing.T) {
	for _, c := range []struct {
		st   redrive.Status
		want string
	}{{redrive.Parked, "NONCE_PUBLISHED"}, {redrive.Retrying, "NONCE_PUBLISHED_RETRY"}, {redrive.Done, "NONCE_PUBLISHED_DONE"}, {redrive.TimedOut, "NONCE_PUBLISHED_TIMEOUT"}} {
		if got := redrive.StateName("NONCE_PUBLISHED", c.st); got != c.want {
			t.Errorf("StateName(%v) = %s, want %s", c.st, got, c.want)
		}
		back, err := redrive.ParseStatus(c.st.String())
		if err != nil || back != c.st {
			t.Errorf("ParseStatus(%q) = %v, %v", c.st.String(), back, err)
		}
	}
	if _, err := redrive.ParseStatus("running"); err == nil {
		t.Error("ParseStatus accepted an unknown status")
	}
	if got := redrive.RecordKey("orders", 3, 42); got != "orders/3/42" {
		t.Errorf("RecordKey = %s", got)
	}
}

// fakeStore satisfies redrive.Store for constructor checks only; no test
// here reaches its methods.
type fakeStore struct{ redrive.Store }

func TestConstructorsRejectBadInput(t *testing.T) {
	pub := &redrivetest.Publisher{}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"nil store", func() error { _, err := redrive.NewScheduler(nil, pub); return err }(), "nil store"},
		{"nil publisher", func() error { _, err := redrive.NewScheduler(fakeStore{}, nil); return err }(), "nil publisher"},
		{"zero interval", func() error { _, err := redrive.NewScheduler(fakeStore{}, pub, redrive.WithInterval(0)); return err }(), "interval"},
		{"negative timeout", func() error {
			_, err := redrive.NewScheduler(fakeStore{}, pub, redrive.WithRetryTimeout(-time.Second))
			return err
		}(), "retry timeout"},
		{"negative max", func() error {
			_, err := redrive.NewScheduler(fakeStore{}, pub, redrive.WithMaxRedrives(-1))
			return err
		}(), "maximum re-drives"},
		{"zero batch", func() error { _, err := redrive.NewScheduler(fakeStore{}, pub, redrive.WithBatchSize(0)); return err }(), "batch size"},
		{"park nil store", func() error { _, err := redrive.Park(nil, time.Minute); return err }(), "nil store"},
		{"park zero expiry", func() error { _, err := redrive.Park(fakeStore{}, 0); return err }(), "expiry"},
		{"await empty key", func() error {
			_, _, err := redrive.Await(t.Context(), fakeStore{}, redrive.Awaiting{State: "S", Expiry: time.Minute})
			return err
		}(), "empty key"},
		{"await no state", func() error {
			_, _, err := redrive.Await(t.Context(), fakeStore{}, redrive.Awaiting{Key: "k", Expiry: time.Minute})
			return err
		}(), "empty state"},
		{"await no expiry", func() error {
			_, _, err := redrive.Await(t.Context(), fakeStore{}, redrive.Awaiting{Key: "k", State: "S"})
			return err
		}(), "expiry"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %s", c.name, c.err, c.want)
		}
	}
}
