package retrystate_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// A key-ordered partition: record 40 fails and waits for its retry, while
// the records after it, of other keys, are handled. The commit stays at
// 40 and says that 41-43 are done and how far 40 got; a next owner skips
// them and continues 40's count.
func ExampleWindow() {
	w, err := retrystate.NewWindow(40, checkpoint.WindowLimits{}) // 4096 bytes, the broker's default
	if err != nil {
		panic(err)
	}
	for o := int64(40); o < 45; o++ {
		if err := w.Admit(o); err != nil {
			panic(err)
		}
	}
	first := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	_ = w.Retry(40, retrystate.State{Retries: 1, FirstFailure: first, NextAt: first.Add(time.Second), LastDelay: time.Second, LastError: "timeout"})
	for _, o := range []int64{41, 42, 43} {
		_ = w.Finish(o)
	}
	offset, md := w.Base(), w.Encode() // commit these; 44 is still being handled
	fmt.Println("commit", offset, "with", len(md), "bytes of metadata")

	next, err := retrystate.RestoreWindow(offset, md, checkpoint.WindowLimits{})
	if err != nil {
		panic(err)
	}
	for o := int64(40); o < 45; o++ {
		s, retrying := next.State(o)
		switch {
		case next.Finished(o):
			fmt.Println(o, "finished: skipped")
		case retrying:
			fmt.Println(o, s)
		default:
			fmt.Println(o, "delivered afresh")
		}
	}

	// Admission stops before the window could pass its limit.
	full := 0
	for o := next.Next(); ; o++ {
		if err := next.Admit(o); errors.Is(err, retrystate.ErrWindowFull) {
			break
		}
		full++
	}
	fmt.Println("admitted", full, "more, then full")
	// Output:
	// commit 40 with 42 bytes of metadata
	// 40 retry 1 due at 12:00:01 UTC
	// 41 finished: skipped
	// 42 finished: skipped
	// 43 finished: skipped
	// 44 delivered afresh
	// admitted 25 more, then full
}
