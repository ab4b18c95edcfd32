package retrystate_test

import (
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

func ExampleMachine() {
	m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(5 * time.Second)})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.Begin(time.Time{})
	for {
		d := m.Fail(now, fmt.Errorf("boom"), nil)
		if d.Action == retrystate.StopRetrying {
			fmt.Println(d.Action, "-", d.Reason)
			break
		}
		fmt.Println(d.Action, "retry", d.Retry, "at", d.At.Format(time.TimeOnly))
		now = d.At
	}
	// Output:
	// retry later retry 1 at 00:00:05
	// retry later retry 2 at 00:00:10
	// stop retrying - retries spent
}
