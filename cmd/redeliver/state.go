package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// stateJSON is the JSON form of a decoded retry state.
type stateJSON struct {
	Metadata  string `json:"metadata"`
	Redeliver bool   `json:"redeliver"` // written by redeliver
	Error     string `json:"error,omitempty"`
	// Summary is the state in words, as the engine's decoder writes it.
	Summary string `json:"summary,omitempty"`
	// Offset is the offset of the record the state belongs to; absent
	// when the state does not name one (written before states did).
	Offset *int64 `json:"offset,omitempty"`
	// Retries is the number of the retry due, or started when Started.
	Retries int  `json:"retries"`
	Started bool `json:"started,omitempty"`
	// Deliveries counts the deliveries of the batch so far: the first and
	// the retries made (with a started retry, the one that started).
	Deliveries   uint64       `json:"deliveries,omitempty"`
	FirstFailure time.Time    `json:"firstFailure,omitzero"`
	LastDelay    string       `json:"lastDelay,omitempty"`
	NextAt       time.Time    `json:"nextAt,omitzero"`
	RetryResult  *retryResult `json:"retryResult,omitempty"`
	// OutageTime is the time waited out in outages since the first
	// failure, which maxRetryTime does not count.
	OutageTime string `json:"outageTime,omitempty"`
	// GivenUp is why the record was given up ("retries spent", ...) when
	// its exhaustion action has not succeeded yet: a next owner gives it
	// up again at once, without a delivery. LastError is its last
	// error, as the state keeps it (its first 128 bytes).
	GivenUp   string `json:"givenUp,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// Records is how many records from Offset the state covers: with
	// GivenUp, how many were given up (1 for a record given up alone, the
	// batch's size otherwise); for a retry of a batch that failed as a
	// whole, the batch's size. A next owner retries or gives up these and
	// delivers the ones after them. Absent when the state does not say
	// (written before states did).
	Records int `json:"records,omitempty"`
	// Alone reports a retry of a record that failed alone (FailedAt,
	// PerRecord): given up, it is given up alone.
	Alone bool `json:"alone,omitempty"`
	// Halted reports a partition stopped at the record (StopPartition)
	// until an operator resumes or skips it; a next owner delivers the
	// record again with a fresh count.
	Halted bool `json:"halted,omitempty"`
}

func runState(args []string, e env) int {
	fs := newFlags("state", e)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, code := parseArgs(fs, args, e)
	if code >= 0 {
		return code
	}
	if len(pos) != 1 {
		return usageError(fs, "want one metadata string (quote it: it holds semicolons)")
	}
	md := pos[0]
	s, err := retrystate.DecodeState(md)
	out := stateJSON{Metadata: md, Redeliver: err == nil, Retries: s.Retries, Started: s.Started, Deliveries: deliveriesOf(s),
		FirstFailure: s.FirstFailure.UTC(), NextAt: s.NextAt.UTC()}
	if err == nil && md != "" {
		out.Summary = s.String()
	}
	if s.FirstFailure.IsZero() {
		out.FirstFailure = time.Time{}
	}
	if s.NextAt.IsZero() {
		out.NextAt = time.Time{}
	}
	if s.LastDelay > 0 {
		out.LastDelay = s.LastDelay.String()
	}
	if s.Request != (retrystate.Request{}) {
		out.RetryResult = &retryResult{MaxRetries: s.Request.MaxRetries, Delay: s.Request.Delay.String()}
	}
	if s.Offset >= 0 && (s.Retries > 0 || s.GivenUp != 0) {
		out.Offset = &s.Offset
	}
	if s.OutageTime > 0 {
		out.OutageTime = s.OutageTime.String()
	}
	if s.GivenUp != 0 || s.Retries > 0 {
		out.LastError, out.Records, out.Alone = s.LastError, max(s.Records, 0), s.Alone
	}
	if s.GivenUp != 0 {
		out.GivenUp, out.Halted = s.GivenUp.String(), s.Halted
	}
	if err != nil {
		out.Error = err.Error()
	}
	if *asJSON {
		printJSON(e.stdout, out)
		if err != nil {
			return exitProblems
		}
		return exitOK
	}
	switch {
	case errors.Is(err, retrystate.ErrForeignMetadata):
		fmt.Fprintf(e.stdout, "%q is not redeliver's retry state: another tool wrote it, and redeliver ignores it\n", md)
		return exitProblems
	case err != nil:
		fmt.Fprintf(e.stdout, "damaged retry state: %v\nredeliver ignores it: the batch at the checkpoint starts its retry count over\n", err)
		return exitProblems
	case md == "":
		fmt.Fprintln(e.stdout, "empty metadata: no retry state; the batch at the checkpoint is delivered as a first delivery")
		return exitOK
	case s.Retries == 0 && s.GivenUp == 0:
		fmt.Fprintln(e.stdout, "no retry in the state: the batch at the checkpoint is delivered as a first delivery")
		return exitOK
	}
	now := e.now()
	fmt.Fprintf(e.stdout, "retry state written by redeliver (%s)\n", md)
	fmt.Fprintf(e.stdout, "  state:           %s\n", s)
	if s.Offset >= 0 {
		fmt.Fprintf(e.stdout, "  record:          offset %d: a next owner applies the state only with the checkpoint at that offset\n", s.Offset)
	} else {
		fmt.Fprintln(e.stdout, "  record:          not named (a state written before states named their record): applied to the record at the checkpoint")
	}
	sofar := "the first" // the deliveries before the retry due or started
	if made := s.Retries - 1; made > 0 {
		sofar += " and " + retries(made)
	}
	switch {
	case s.GivenUp != 0:
		made := "the first, which failed"
		if s.Retries > 0 {
			made = "the first and " + retries(s.Retries) + ", all failed"
		}
		fmt.Fprintf(e.stdout, "  deliveries:      %d: %s\n", out.Deliveries, made)
		switch {
		case s.Records == 1:
			fmt.Fprintf(e.stdout, "  records:         1, offset %d alone: a next owner delivers the records after it\n", s.Offset)
		case s.Records > 1:
			fmt.Fprintf(e.stdout, "  records:         %d, offsets %d to %d: a next owner gives up these and delivers the records after them\n",
				s.Records, s.Offset, s.Offset+int64(s.Records)-1)
		}
		if s.Halted {
			fmt.Fprintf(e.stdout, "  stopped:         given up (%s), and its exhaustion action stopped the partition at this record (StopPartition):\n", s.GivenUp)
			fmt.Fprintln(e.stdout, "                   its consumer waits for an operator's Resume or Skip; a next owner delivers the record again with a fresh count")
		} else {
			fmt.Fprintf(e.stdout, "  given up:        %s; its exhaustion action (a dead letter, a park) has not succeeded yet:\n", s.GivenUp)
			fmt.Fprintln(e.stdout, "                   it is tried again, and a next owner gives the record up again at once, without delivering it")
		}
		if s.LastError != "" {
			fmt.Fprintf(e.stdout, "  last error:      %s\n", s.LastError)
		}
	case s.Started:
		fmt.Fprintf(e.stdout, "  deliveries:      %d: %s, then retry %d, which started: its outcome is not recorded, and a next owner counts it as made\n",
			out.Deliveries, sofar, s.Retries)
	default:
		fmt.Fprintf(e.stdout, "  deliveries:      %d: %s (retry %d is due)\n", out.Deliveries, sofar, s.Retries)
	}
	if s.GivenUp == 0 {
		switch {
		case s.Alone:
			fmt.Fprintf(e.stdout, "  records:         the failures were offset %d's alone: if a next owner gives it up, it gives up that record only\n", s.Offset)
		case s.Records > 0:
			fmt.Fprintf(e.stdout, "  records:         %d, offsets %d to %d, failed as a batch: a next owner retries or gives up these together\n",
				s.Records, s.Offset, s.Offset+int64(s.Records)-1)
		}
		switch {
		case s.LastError == "":
		case s.Started:
			fmt.Fprintf(e.stdout, "  last error:      %s (of the delivery before the retry that started)\n", s.LastError)
		default:
			fmt.Fprintf(e.stdout, "  last error:      %s (a next owner that refuses the retry gives the record up with it)\n", s.LastError)
		}
	}
	if !s.FirstFailure.IsZero() {
		fmt.Fprintf(e.stdout, "  first failure:   %s (%s)\n", stamp(s.FirstFailure), relative(now, s.FirstFailure))
	}
	if s.LastDelay > 0 && s.Retries > 0 {
		fmt.Fprintf(e.stdout, "  last backoff:    %v, before retry %d\n", s.LastDelay, s.Retries)
	}
	if !s.NextAt.IsZero() {
		fmt.Fprintf(e.stdout, "  retry %d due:     %s (%s)\n", s.Retries, stamp(s.NextAt), relative(now, s.NextAt))
	}
	if s.OutageTime > 0 {
		fmt.Fprintf(e.stdout, "  outage waits:    %v since the first failure, which maxRetryTime does not count\n", s.OutageTime)
	}
	if r := s.Request; r != (retrystate.Request{}) {
		fmt.Fprintf(e.stdout, "  RetryResult:     the handler asked for %s, %v apart: they replace the policy for this batch\n", retries(r.MaxRetries), r.Delay)
	}
	return exitOK
}

// deliveriesOf counts the deliveries of the batch a state describes: the
// first, the retries made, and a started retry; a record given up had the
// first and every retry it was given up after.
func deliveriesOf(s retrystate.State) uint64 {
	switch {
	case s.GivenUp != 0:
		return uint64(max(s.Retries, 0)) + 1 // no overflow at the largest count
	case s.Retries <= 0:
		return 0
	case s.Started:
		return uint64(s.Retries) + 1 // no overflow at the largest count
	}
	return uint64(s.Retries)
}

// stamp formats t in UTC to the millisecond, as the state stores it.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// relative says how far t is from now: "in 3s" or "5m0s ago".
func relative(now, t time.Time) string {
	d := t.Sub(now).Round(time.Second)
	switch {
	case d > 0:
		return "in " + span(d)
	case d < 0:
		return span(-d) + " ago"
	}
	return "now"
}

// span formats d for reading: seconds below an hour, minutes below two
// days, hours beyond.
func span(d time.Duration) string {
	switch {
	case d < time.Hour:
		return d.String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	days := d / (24 * time.Hour)
	return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
}
