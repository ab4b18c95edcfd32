package kafkago

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// How a fetcher backs off and waits, as a kafka.Reader does by default.
const (
	fetchBackoffMin  = 100 * time.Millisecond
	fetchBackoffMax  = time.Second
	readBatchTimeout = 10 * time.Second // for each record of a fetch answer, and for the answer beyond MaxWait
	offsetsTimeout   = 10 * time.Second
)

// errFetcherClosed answers a connect after the fetcher was closed.
var errFetcherClosed = errors.New("kafkago: fetcher closed")

// fetcher reads one partition from its leader through a [kafka.Conn], one
// fetch answer at a time. It does what a [kafka.Reader] without a group
// does (and handles the same errors the same way), without the reader's
// queue and goroutine: a batch can be what one fetch returned, pausing is
// not fetching, and closing the fetcher closes its connection at once,
// where a reader waiting for a fetch answer holds Reader.Close up for the
// fetch's MaxWait.
//
// One goroutine (the claim's pump) calls connect, read and offsets; close
// may be called from any.
type fetcher struct {
	dialer    *kafka.Dialer
	brokers   []string
	topic     string
	partition int
	fetch     kafka.ReadBatchConfig // MaxWait is the wait of the fetch request; the rest as given
	log       *slog.Logger

	mu     sync.Mutex
	conn   *kafka.Conn
	closed bool
}

// connected reports whether the fetcher has a connection to read from.
func (f *fetcher) connected() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conn != nil
}

// connect connects to the partition's leader and returns the absolute
// offset reading starts at: offset, or the partition's first or last
// offset for kafka.FirstOffset and kafka.LastOffset, or its first offset
// when offset is before it (the records were deleted). An offset past the
// partition's end is an error (kafka.OffsetOutOfRange): the caller tries
// again later.
func (f *fetcher) connect(ctx context.Context, offset int64) (int64, error) {
	var err error
	for _, broker := range f.brokers {
		var conn *kafka.Conn
		conn, err = f.dialer.DialLeader(ctx, "tcp", broker, f.topic, f.partition)
		if err != nil {
			continue
		}
		var first, last int64
		_ = conn.SetDeadline(time.Now().Add(offsetsTimeout))
		if first, last, err = conn.ReadOffsets(); err != nil {
			conn.Close()
			return 0, err
		}
		switch {
		case offset == kafka.FirstOffset:
			offset = first
		case offset == kafka.LastOffset:
			offset = last
		case offset < first:
			f.log.Warn("redeliver: offset no longer in the log, skipping to the first offset there", "topic", f.topic,
				"partition", f.partition, "offset", offset, "first", first)
			offset = first
		case offset > last:
			conn.Close()
			return 0, fmt.Errorf("offset %d past the end %d of the partition: %w", offset, last, kafka.OffsetOutOfRange)
		}
		_, _ = conn.Seek(offset, kafka.SeekAbsolute|kafka.SeekDontCheck)
		_ = conn.SetDeadline(time.Time{})
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.closed {
			conn.Close()
			return 0, errFetcherClosed
		}
		f.conn = conn
		return offset, nil
	}
	return 0, err
}

// read fetches once at offset and appends the records of the answer to
// msgs. It returns them, the offset to fetch next, and the error that ended
// the answer: io.EOF when the whole answer was read.
func (f *fetcher) read(offset int64, msgs []kafka.Message) ([]kafka.Message, int64, error) {
	f.mu.Lock()
	conn := f.conn
	f.mu.Unlock()
	if conn == nil {
		return msgs, offset, errFetcherClosed
	}
	// One deadline for the answer, not one per record as kafka.Reader
	// sets: the answer is read in one go.
	_ = conn.SetReadDeadline(time.Now().Add(f.fetch.MaxWait + readBatchTimeout))
	batch := conn.ReadBatchWith(f.fetch)
	var err error
	for {
		var m kafka.Message
		if m, err = batch.ReadMessage(); err != nil {
			batch.Close()
			break
		}
		msgs = append(msgs, m)
		offset = m.Offset + 1
	}
	_ = conn.SetReadDeadline(time.Time{})
	return msgs, offset, err
}

// offsets returns the partition's first and last offsets.
func (f *fetcher) offsets() (first, last int64, err error) {
	f.mu.Lock()
	conn := f.conn
	f.mu.Unlock()
	if conn == nil {
		return 0, 0, errFetcherClosed
	}
	_ = conn.SetDeadline(time.Now().Add(offsetsTimeout))
	defer conn.SetDeadline(time.Time{})
	return conn.ReadOffsets()
}

// drop closes the connection; the next read needs a connect.
func (f *fetcher) drop() {
	f.mu.Lock()
	conn := f.conn
	f.conn = nil
	f.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// close closes the connection, which ends a read in progress, and refuses
// later connects.
func (f *fetcher) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.drop()
}

// backoff is kafka-go's reader backoff: attempt² x the minimum, capped.
func backoff(attempt int) time.Duration {
	return min(time.Duration(attempt*attempt)*fetchBackoffMin, fetchBackoffMax)
}

// fetchLoop reads the partition from offset into the claim's buffer until
// the claim ends, waiting while the claim is paused or its buffer full, and
// trying again after errors as a kafka.Reader does.
func (cl *claim) fetchLoop(offset int64) {
	var (
		f       = &cl.f
		ctx     = cl.ctx
		attempt int             // failed connects in a row
		errs    int             // failed reads in a row
		msgs    []kafka.Message // the slice the next answer is read into
	)
	for {
		if !cl.waitRoom() {
			return
		}
		if !f.connected() {
			if attempt > 0 && !sleep(ctx, backoff(attempt)) {
				return
			}
			start, err := f.connect(ctx, offset)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				attempt++
				f.log.Warn("redeliver: connecting to the partition leader failed, will try again", "topic", f.topic,
					"partition", f.partition, "offset", offset, "try", attempt, "error", err)
				continue
			}
			attempt, errs, offset = 0, 0, start
		}
		if errs > 0 && !sleep(ctx, backoff(errs)) {
			return
		}
		if msgs == nil {
			msgs = cl.slice()
		}
		var err error
		msgs, offset, err = f.read(offset, msgs[:0])
		if len(msgs) > 0 {
			cl.push(msgs) // the buffer keeps the slice
			msgs = nil
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil, errors.Is(err, io.EOF), errors.Is(err, kafka.RequestTimedOut):
			errs = 0
		case errors.Is(err, io.ErrNoProgress), errors.Is(err, kafka.UnknownTopicOrPartition),
			errors.Is(err, kafka.NotLeaderForPartition), errors.Is(err, errFetcherClosed):
			f.log.Info("redeliver: reconnecting to the partition leader", "topic", f.topic, "partition", f.partition, "error", err)
			f.drop()
		case errors.Is(err, kafka.OffsetOutOfRange):
			first, last, oerr := f.offsets()
			switch {
			case oerr != nil:
				f.drop()
			case offset < first:
				f.log.Warn("redeliver: offset no longer in the log, skipping to the first offset there", "topic", f.topic,
					"partition", f.partition, "offset", offset, "first", first)
				offset, errs = first, 0
			case offset < last:
				errs = 0
			default:
				errs++
			}
		default:
			f.log.Warn("redeliver: fetch error", "topic", f.topic, "partition", f.partition, "offset", offset, "error", err)
			var kerr kafka.Error
			if errors.As(err, &kerr) {
				errs++
			} else {
				f.drop()
				attempt = 1
			}
		}
	}
}
