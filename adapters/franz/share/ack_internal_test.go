package share

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

type captured struct {
	mu    sync.Mutex
	lines []string
}

func (c *captured) Enabled(context.Context, slog.Level) bool { return true }
func (c *captured) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	c.mu.Lock()
	c.lines = append(c.lines, line)
	c.mu.Unlock()
	return nil
}
func (c *captured) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *captured) WithGroup(string) slog.Handler      { return c }

// Defect 6: when the broker refuses a final acknowledgement (a REJECT
// after a dead letter was written), the lane logs it with the records it
// was for: the broker delivers them again.
func TestRefusedFinalAcknowledgementIsLogged(t *testing.T) {
	var c captured
	l := &lane{log: slog.New(&c)}
	l.finalMade(&kgo.Record{Topic: "orders", Partition: 3, Offset: 7}, Rejected)
	l.acked(nil, kgo.ShareAckResults{{Topic: "orders", Partition: 3, Err: errors.New("INVALID_RECORD_STATE")}})
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, line := range c.lines {
		if strings.HasPrefix(line, "WARN") && strings.Contains(line, "refused") && strings.Contains(line, "offsets=[7]") && strings.Contains(line, "rejected=1") {
			return
		}
	}
	t.Fatalf("no Warn line names the refused REJECT of offset 7: %q", c.lines)
}
