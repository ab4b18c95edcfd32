package health

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Run checks until nothing is wrong, logs each problem once and its end,
// and Err reports what the last check found.
func TestCheckerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		c := &Checker{Log: slog.New(slog.NewTextHandler(&buf, nil))}
		missing := errors.New("UNKNOWN_TOPIC_OR_PARTITION")
		calls := 0
		errs := make(chan error, 4)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Run(context.Background(), time.Second, time.Second, func(context.Context) []Problem {
				calls++
				if calls <= 3 {
					return []Problem{Topic("franz", "t", "consumed", missing)}
				}
				return nil
			})
		}()
		synctest.Wait()
		errs <- c.Err()
		<-done
		if calls != 4 {
			t.Fatalf("%d checks, want 4: until one finds nothing", calls)
		}
		if err := <-errs; err == nil || !strings.Contains(err.Error(), `consumed topic "t"`) || !errors.Is(err, missing) {
			t.Fatalf("Err during the problem: %v", err)
		}
		if err := c.Err(); err != nil {
			t.Fatalf("Err after the checks pass: %v", err)
		}
		if n := strings.Count(buf.String(), "is not there"); n != 1 {
			t.Errorf("the problem was logged %d times, want once:\n%s", n, buf.String())
		}
		if !strings.Contains(buf.String(), "passes now") {
			t.Errorf("its end was not logged:\n%s", buf.String())
		}
	})
}
