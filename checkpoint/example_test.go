package checkpoint_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

func ExampleFixed() {
	p := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(5 * time.Second)}
	fmt.Println(p.Schedule(10, nil))
	// Output: [5s 5s 5s]
}

func ExampleExponential() {
	p := checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Exponential(time.Second), MaxDelay: 30 * time.Second}
	fmt.Println(p.Schedule(7, nil))
	// Output: [1s 2s 4s 8s 16s 30s 30s]
}

func ExampleFullJitter() {
	// A seeded source makes jitter reproducible; each delay is a uniform
	// pick in [0, min(10s, 1s*2^(n-1))).
	rnd := rand.New(rand.NewPCG(1, 2))
	p := checkpoint.Policy{MaxRetries: 6, Backoff: checkpoint.FullJitter(time.Second, 10*time.Second)}
	for _, d := range p.Schedule(6, rnd) {
		fmt.Println(d.Round(time.Millisecond))
	}
	// Output:
	// 676ms
	// 923ms
	// 2.034s
	// 3.438s
	// 7.978s
	// 3.884s
}

func ExampleMachine() {
	m := checkpoint.NewMachine(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(5 * time.Second)})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.Begin(time.Time{})
	for {
		d := m.Fail(now, fmt.Errorf("boom"), nil)
		if d.Action == checkpoint.StopRetrying {
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
