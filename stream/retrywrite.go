package stream

import "time"

// When a retry's started mark is written, the same for a partition's batch
// (worker.run) and for a record in key ordering (kdriver): the mark must be
// durable before the retry is delivered (DESIGN 9.2). After a backoff of at
// most maxMarkLead it is sent ahead of the retry's due time by markLead, so
// that it lands about when the backoff ends rather than a commit's time
// after it; and once a commit's time is known, a backoff too short for the
// retry state and the mark one after the other gets the mark alone, written
// at once: it counts the failure and the retry both (markAlone). A longer
// backoff's mark is written once it is over: there a commit is a small part
// of the wait, and a move during the backoff never finds a retry counted
// that was not delivered.

// maxMarkLead bounds how early a retry's started mark is sent before the
// retry is due, and the backoffs whose marks are sent ahead at all
// (shortBackoff): a crash or a move after the mark landed and before the
// retry was delivered counts a delivery that was not made, so the unit can
// be given up one delivery early, never late. The same holds, for a shorter
// moment, of any mark written just before its delivery starts, and a next
// owner counts the retry in both cases.
const maxMarkLead = 10 * time.Millisecond

// timerSlack is how late a timer may wake: on Linux the runtime waits for
// timers in whole milliseconds when it has nothing else to do (a 300µs timer
// fires after about 1.1ms, a 1.5ms one after about 2.2ms), so a mark sent
// after a wait of its own would go out up to that much late.
const timerSlack = time.Millisecond

// shortBackoff reports whether a retry due at due, scheduled at now, has a
// backoff short enough (at most maxMarkLead) for its started mark to be
// sent ahead of it, or written with its failure (markAlone).
func shortBackoff(now, due time.Time) bool { return due.Sub(now) <= maxMarkLead }

// markLead is how long before a retry is due its started mark is sent, after
// a short backoff: the time the processor's latest retry-state commit took
// and a timer's slack, at most maxMarkLead.
func (p *Processor) markLead() time.Duration {
	return min(time.Duration(p.wrote.Load())+timerSlack, maxMarkLead)
}

// markAlone reports whether a failure just scheduled at now, whose retry is
// due at due after a backoff of delay, writes no retry state of its own but
// its started mark, at once: a short backoff, with a commit's time known,
// too short for the state and the mark one after the other (with the
// mark's lead). The caller leaves it out under an outage budget, whose
// outage can hold a due retry back.
func (p *Processor) markAlone(now, due time.Time, delay time.Duration) bool {
	wrote := p.writeTime(now)
	return delay > 0 && wrote > 0 && shortBackoff(now, due) && due.Sub(now) <= wrote+p.markLead()
}

// writeTime is how long a retry-state commit takes, as far as the
// processor knows at now: the latest one's time or, when longer, the time
// since a commit now in flight began. Many partitions failing at once
// (1,000 partitions handling one poll) find no commit timed yet, and the
// first one in flight: each would write its retry state and its mark one
// after the other, where a backoff shorter than the write already gets the
// mark alone.
func (p *Processor) writeTime(now time.Time) time.Duration {
	d := time.Duration(p.wrote.Load())
	if since := p.writing.Load(); since != 0 {
		d = max(d, now.Sub(time.Unix(0, since))) // a clock set back reads as no more than d
	}
	return d
}

// beginWrite notes that a commit carrying a retry state begins at start,
// unless one is in flight already: it reports whether this one is the
// one noted, to be passed to timedWrite.
func (p *Processor) beginWrite(start time.Time) bool {
	return p.writing.CompareAndSwap(0, start.UnixNano())
}

// timedWrite records how long a commit that carries a retry state took,
// from start, as the time the next marks are sent ahead by (markLead), and
// ends the note beginWrite made when mine.
func (p *Processor) timedWrite(start time.Time, mine bool) {
	p.wrote.Store(int64(max(p.cfg.clock.Now().Sub(start), 0))) // a clock set back reads as no time
	if mine {
		p.writing.Store(0)
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
