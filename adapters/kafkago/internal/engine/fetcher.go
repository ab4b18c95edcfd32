package engine

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	"github.com/segmentio/kafka-go/protocol/fetch"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
	"github.com/segmentio/kafka-go/protocol/metadata"
	"github.com/segmentio/kafka-go/protocol/saslauthenticate"
	"github.com/segmentio/kafka-go/protocol/saslhandshake"
	"github.com/segmentio/kafka-go/sasl"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
)

// How a fetcher backs off and waits, as a kafka.Reader does by default.
const (
	fetchBackoffMin  = 100 * time.Millisecond
	fetchBackoffMax  = time.Second
	readBatchTimeout = 10 * time.Second // for a fetch answer beyond MaxWait
	// connectTimeout bounds each step of a connect to the partition's
	// leader: the leader lookup, the dial and handshake, listing the
	// partition's offsets.
	connectTimeout = 10 * time.Second
)

// errFetcherClosed answers a connect after the fetcher was closed.
var errFetcherClosed = errors.New("kafkago: fetcher closed")

// record is a fetched record, with the leader epoch of its record batch
// (-1 when unknown), which the commit after it carries.
type record struct {
	offset  int64
	epoch   int32
	time    time.Time
	key     []byte
	value   []byte
	headers []protocol.Header
}

// fetcher reads one partition from its leader through a connection of its
// own, one fetch answer at a time: the fetch request as kafka-go's protocol
// package writes it, and its answer decoded record batch by record batch
// (decode.go), the records' keys and values left in the answer's buffer.
// kafka-go's [kafka.Conn] and [kafka.Reader] read the
// records of an answer but drop what the batches say about them: they hand
// out transaction markers (control records) as records, hand out the
// records of aborted transactions under kafka.ReadCommitted (the answer's
// list of aborted transactions is ignored), and lose the batches' leader
// epochs. The fetcher keeps all three: control batches are never records,
// aborted transactions are dropped under kafka.ReadCommitted as Kafka's own
// consumer drops them, and every record carries its batch's leader epoch.
//
// Errors are handled as a kafka.Reader handles them, plus what it lacks:
// after any error the connection is dropped (the next read connects to the
// partition's leader again, as it may have moved) and the reconnect backs
// off as kafka.Reader's reads do, the backoff reset only by a successful
// read, not by a successful connect. A fetch offset outside the partition
// (past its end: the topic was deleted and created again, or an unclean
// leader election truncated the log; or before its start: retention deleted
// the records) is reset to the partition's start or end, per the group's
// start offset, as Kafka's auto.offset.reset does, and logged at Error with
// the offsets skipped or read again.
//
// One goroutine (the claim's pump) calls connect and read; close may be
// called from any.
type fetcher struct {
	dialer    *kafka.Dialer
	brokers   []string
	topic     string
	partition int
	fetch     kafka.ReadBatchConfig
	start     int64 // kafka.FirstOffset or kafka.LastOffset: where a reset goes
	log       *slog.Logger

	mu      sync.Mutex
	conn    *protocol.Conn
	version int16 // of the fetch requests conn's broker and kafka-go agreed on
	closed  bool

	correlationID int32 // of the last fetch request; the pump's alone
	end           int64 // the partition's end in the last fetch answer (see partitionAnswer); the pump's alone
}

// connected reports whether the fetcher has a connection to read from.
func (f *fetcher) connected() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conn != nil
}

// connect connects to the partition's leader and returns the absolute
// offset reading starts at: offset, or the partition's first or last offset
// for kafka.FirstOffset and kafka.LastOffset, or, when offset is outside the
// partition, its first or last offset per the start offset (logged at
// Error). Under kafka.ReadCommitted the last offset is the last stable
// offset: the records of a transaction still open are read once it ends.
//
// Every step (the leader lookup, the dial, the offsets) ends when ctx does,
// and each is bounded by connectTimeout: a claim that ends (a rebalance, a
// shutdown) never waits for a broker that is slow to answer.
func (f *fetcher) connect(ctx context.Context, offset int64) (int64, error) {
	leader, err := f.lookupLeader(ctx)
	if err != nil {
		return 0, err
	}
	dctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, version, err := f.dial(dctx, leader)
	if err != nil {
		return 0, err
	}
	stop := context.AfterFunc(dctx, func() { conn.Close() }) // ends a request in flight
	first, last, stable, err := f.offsets(conn)
	if !stop() || err != nil {
		conn.Close()
		if dctx.Err() != nil {
			err = fmt.Errorf("listing offsets of %s/%d at %s: %w", f.topic, f.partition, leader, context.Cause(dctx))
		}
		return 0, err
	}
	switch {
	case offset == kafka.FirstOffset:
		offset = first
	case offset == kafka.LastOffset:
		offset = stable
	case offset < first || offset > last:
		offset = f.reset(offset, first, last, stable)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		conn.Close()
		return 0, errFetcherClosed
	}
	f.conn, f.version = conn, version
	return offset, nil
}

// reset returns where reading goes on from offset, outside the partition's
// [first, last], per the start offset (its first offset, or its last stable
// one), and logs at Error what that skips or reads again.
func (f *fetcher) reset(offset, first, last, stable int64) int64 {
	to := first
	if f.start == kafka.LastOffset {
		to = stable
	}
	what := "nothing skipped or read again: the partition is empty"
	switch {
	case offset > last && to < last:
		what = fmt.Sprintf("re-reading offsets %d to %d", to, last-1)
	case offset > last && first < last:
		what = fmt.Sprintf("skipping offsets %d to %d", first, last-1)
	case offset < first && offset < to:
		what = fmt.Sprintf("skipping offsets %d to %d", offset, to-1)
	}
	where := "past the end"
	if offset < first {
		where = "before the start (deleted by retention)"
	}
	startName := "FirstOffset"
	if f.start == kafka.LastOffset {
		startName = "LastOffset"
	}
	f.log.Error("redeliver: offset "+where+" of the partition, resetting it per the start offset", "topic", f.topic,
		"partition", f.partition, "offset", offset, "first", first, "end", last, "start", startName, "to", to, "reset", what)
	return to
}

// lookupLeader returns the address of the partition's leader, asking the
// brokers in turn with one metadata request each (kafka-go's own lookup
// retries inside until its context ends, and asks the broker to create a
// topic it does not know). A broker's answer that the topic or partition
// has a problem (unknown, no leader, not authorized) is returned at once,
// as a [kafka.Error].
func (f *fetcher) lookupLeader(ctx context.Context) (string, error) {
	var err error
	for _, broker := range f.brokers {
		var addr string
		addr, err = f.leaderFrom(ctx, broker)
		if err == nil {
			return addr, nil
		}
		var kerr kafka.Error
		if ctx.Err() != nil || errors.As(err, &kerr) {
			break
		}
	}
	return "", err
}

// leaderFrom asks broker for the address of the partition's leader.
func (f *fetcher) leaderFrom(ctx context.Context, broker string) (string, error) {
	res, err := f.metadataFrom(ctx, broker, []string{f.topic})
	if err != nil {
		return "", fmt.Errorf("metadata of %s from %s: %w", f.topic, broker, err)
	}
	for _, t := range res.Topics {
		if t.Name != f.topic {
			continue
		}
		if t.ErrorCode != 0 {
			return "", fmt.Errorf("metadata of %s from %s: %w", f.topic, broker, kafka.Error(t.ErrorCode))
		}
		for _, p := range t.Partitions {
			if p.PartitionIndex != int32(f.partition) {
				continue
			}
			if p.ErrorCode != 0 && p.LeaderID < 0 {
				return "", fmt.Errorf("metadata of %s/%d from %s: %w", f.topic, f.partition, broker, kafka.Error(p.ErrorCode))
			}
			for _, b := range res.Brokers {
				if b.NodeID == p.LeaderID {
					return net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), nil
				}
			}
			return "", fmt.Errorf("no leader for %s/%d: %w", f.topic, f.partition, kafka.LeaderNotAvailable)
		}
		return "", fmt.Errorf("metadata of %s from %s: no partition %d: %w", f.topic, broker, f.partition, kafka.UnknownTopicOrPartition)
	}
	return "", fmt.Errorf("metadata of %s from %s: %w", f.topic, broker, kafka.UnknownTopicOrPartition)
}

// metadataFrom asks broker for the metadata of topics, through a
// connection of its own, never asking the broker to create a topic.
func (f *fetcher) metadataFrom(ctx context.Context, broker string, topics []string) (*metadata.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, _, err := f.dial(ctx, broker)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	m, err := conn.RoundTrip(&metadata.Request{TopicNames: topics})
	if err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return nil, err
	}
	return m.(*metadata.Response), nil
}

// dial opens a connection to addr as the dialer would (its DialFunc or its
// network settings, TLS, SASL) and agrees on API versions with the broker.
// It returns the connection and the version of its fetch requests.
func (f *fetcher) dial(ctx context.Context, addr string) (*protocol.Conn, int16, error) {
	d := f.dialer
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	dial := d.DialFunc
	if dial == nil {
		dial = (&net.Dialer{LocalAddr: d.LocalAddr, FallbackDelay: d.FallbackDelay, KeepAlive: d.KeepAlive}).DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	if d.TLS != nil {
		cfg := d.TLS
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, 0, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	pc := protocol.NewConn(nc, d.ClientID)
	if dl, ok := ctx.Deadline(); ok {
		_ = pc.SetDeadline(dl)
	} else {
		_ = pc.SetDeadline(time.Now().Add(connectTimeout))
	}
	version, err := handshake(ctx, pc, addr, d.SASLMechanism)
	if err != nil {
		pc.Close()
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return nil, 0, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	_ = pc.SetDeadline(time.Time{})
	return pc, version, nil
}

// handshake agrees on API versions with the broker and authenticates with
// mechanism, if any, as kafka-go's Transport does. It returns the version
// of fetch requests agreed on.
func handshake(ctx context.Context, pc *protocol.Conn, addr string, mechanism sasl.Mechanism) (int16, error) {
	m, err := pc.RoundTrip(new(apiversions.Request))
	if err != nil {
		return 0, err
	}
	res := m.(*apiversions.Response)
	if res.ErrorCode != 0 {
		return 0, fmt.Errorf("API versions: %w", kafka.Error(res.ErrorCode))
	}
	versions := make(map[protocol.ApiKey]int16, len(res.ApiKeys))
	for _, k := range res.ApiKeys {
		key := protocol.ApiKey(k.ApiKey)
		versions[key] = key.SelectVersion(k.MinVersion, k.MaxVersion)
	}
	// Fetch v4 is the first with isolation levels and aborted
	// transactions; Kafka 0.11 and later have it.
	if v, ok := versions[protocol.Fetch]; !ok || v < 4 {
		return 0, fmt.Errorf("the broker's fetch requests are older than version 4 (Kafka 0.11)")
	}
	pc.SetVersions(versions)
	if mechanism == nil {
		return versions[protocol.Fetch], nil
	}
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	ctx = sasl.WithMetadata(ctx, &sasl.Metadata{Host: host, Port: p})
	m, err = pc.RoundTrip(&saslhandshake.Request{Mechanism: mechanism.Name()})
	if err != nil {
		return 0, err
	}
	if code := m.(*saslhandshake.Response).ErrorCode; code != 0 {
		return 0, fmt.Errorf("SASL handshake: %w", kafka.Error(code))
	}
	sess, state, err := mechanism.Start(ctx)
	if err != nil {
		return 0, err
	}
	for done := false; !done; {
		m, err := pc.RoundTrip(&saslauthenticate.Request{AuthBytes: state})
		if err != nil {
			return 0, fmt.Errorf("SASL authentication: %w", err)
		}
		res := m.(*saslauthenticate.Response)
		if res.ErrorCode != 0 {
			return 0, fmt.Errorf("SASL authentication: %w: %s", kafka.Error(res.ErrorCode), res.ErrorMessage)
		}
		if done, state, err = sess.Next(ctx, res.AuthBytes); err != nil {
			return 0, err
		}
	}
	return versions[protocol.Fetch], nil
}

// offsets returns the partition's first offset, its end (the offset the
// next record will get) and its last stable offset under kafka.ReadCommitted
// (the end otherwise).
func (f *fetcher) offsets(conn *protocol.Conn) (first, end, stable int64, err error) {
	_ = conn.SetDeadline(time.Now().Add(connectTimeout))
	defer conn.SetDeadline(time.Time{})
	list := func(ts int64, isolation int8) (int64, error) {
		m, err := conn.RoundTrip(&listoffsets.Request{
			ReplicaID: -1, IsolationLevel: isolation,
			Topics: []listoffsets.RequestTopic{{Topic: f.topic, Partitions: []listoffsets.RequestPartition{{
				Partition: int32(f.partition), CurrentLeaderEpoch: -1, Timestamp: ts,
			}}}},
		})
		if err != nil {
			return 0, err
		}
		for _, t := range m.(*listoffsets.Response).Topics {
			for _, p := range t.Partitions {
				if t.Topic != f.topic || p.Partition != int32(f.partition) {
					continue
				}
				if p.ErrorCode != 0 {
					return 0, fmt.Errorf("listing offsets of %s/%d: %w", f.topic, f.partition, kafka.Error(p.ErrorCode))
				}
				return p.Offset, nil
			}
		}
		return 0, fmt.Errorf("listing offsets of %s/%d: no answer for the partition", f.topic, f.partition)
	}
	if first, err = list(kafka.FirstOffset, 0); err != nil {
		return 0, 0, 0, err
	}
	if end, err = list(kafka.LastOffset, 0); err != nil {
		return 0, 0, 0, err
	}
	stable = end
	if f.fetch.IsolationLevel == kafka.ReadCommitted && f.start == kafka.LastOffset {
		if stable, err = list(kafka.LastOffset, 1); err != nil {
			return 0, 0, 0, err
		}
	}
	return first, end, stable, nil
}

// read fetches once at offset and appends the answer's records to recs,
// less control records, records before offset, and, under
// kafka.ReadCommitted, records of aborted transactions. It returns them,
// the offset to fetch next (past every batch of the answer, skipped ones
// included) and the error of the request, of the answer or of the
// partition (a [kafka.Error]).
func (f *fetcher) read(offset int64, recs []record) ([]record, int64, error) {
	f.mu.Lock()
	conn, version := f.conn, f.version
	f.mu.Unlock()
	if conn == nil {
		return recs, offset, errFetcherClosed
	}
	_ = conn.SetDeadline(time.Now().Add(f.fetch.MaxWait + readBatchTimeout))
	defer conn.SetDeadline(time.Time{})
	f.correlationID++
	answer, err := roundTrip(conn, version, f.correlationID, f.dialer.ClientID, &fetch.Request{
		ReplicaID:      -1,
		MaxWaitTime:    int32(f.fetch.MaxWait / time.Millisecond),
		MinBytes:       int32(f.fetch.MinBytes),
		MaxBytes:       int32(f.fetch.MaxBytes),
		IsolationLevel: int8(f.fetch.IsolationLevel),
		SessionID:      0,
		SessionEpoch:   -1, // no fetch session: every request is a full fetch
		Topics: []fetch.RequestTopic{{Topic: f.topic, Partitions: []fetch.RequestPartition{{
			Partition: int32(f.partition), CurrentLeaderEpoch: -1, FetchOffset: offset,
			LogStartOffset: -1, PartitionMaxBytes: int32(f.fetch.MaxBytes),
		}}}},
	})
	if err != nil {
		return recs, offset, err
	}
	p, err := parseFetch(answer, version, f.correlationID, f.topic, int32(f.partition))
	if err != nil {
		return recs, offset, err
	}
	f.end = p.hwm
	if f.fetch.IsolationLevel == kafka.ReadCommitted && p.lso >= 0 {
		f.end = p.lso
	}
	out, next, err := decodeBatches(p.records, offset, f.fetch.IsolationLevel == kafka.ReadCommitted, p.aborted, recs)
	if errors.Is(err, errOldFormat) {
		return f.legacyRecords(answer, version, offset, recs)
	}
	if err != nil {
		err = fmt.Errorf("fetch of %s/%d: %w", f.topic, f.partition, err)
	}
	return out, next, err
}

// legacyRecords decodes answer, a fetch answer with a record batch older
// than the v2 message format (written before Kafka 0.11), with kafka-go's
// protocol package, and appends its records to recs as [fetcher.read]
// does.
func (f *fetcher) legacyRecords(answer []byte, version int16, offset int64, recs []record) ([]record, int64, error) {
	_, m, err := protocol.ReadResponse(bytes.NewReader(answer), protocol.Fetch, version)
	if err != nil {
		return recs, offset, err
	}
	res := m.(*fetch.Response)
	for i := range res.Topics {
		t := &res.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if t.Topic == f.topic && p.Partition == int32(f.partition) {
				return f.records(p, offset, recs)
			}
		}
	}
	return recs, offset, fmt.Errorf("fetch of %s/%d: no answer for the partition", f.topic, f.partition)
}

// records appends the records of a partition's fetch answer, as kafka-go's
// protocol package decoded it, to recs; see [fetcher.read].
func (f *fetcher) records(p *fetch.ResponsePartition, offset int64, recs []record) ([]record, int64, error) {
	var batches []protocol.RecordReader
	switch rs := p.RecordSet.Records.(type) {
	case nil:
		return recs, offset, nil
	case *protocol.RecordStream:
		batches = rs.Records
	default:
		batches = []protocol.RecordReader{rs}
	}
	// Under read_committed the broker sends the records of aborted
	// transactions up to the last stable offset, with the list of those
	// transactions: a transactional batch of a producer is aborted from
	// the transaction's first offset until that producer's abort marker.
	var (
		aborted []fetch.ResponseTransaction // not yet reached, by first offset
		open    map[int64]bool              // producers in an aborted transaction
	)
	if f.fetch.IsolationLevel == kafka.ReadCommitted && len(p.AbortedTransactions) > 0 {
		aborted = slices.SortedFunc(slices.Values(p.AbortedTransactions), func(a, b fetch.ResponseTransaction) int {
			return cmp.Compare(a.FirstOffset, b.FirstOffset)
		})
		open = make(map[int64]bool)
	}
	next := offset
	for _, b := range batches {
		var (
			epoch = int32(-1)
			skip  bool
		)
		switch b := b.(type) {
		case *protocol.ControlBatch:
			for {
				r, err := b.ReadRecord()
				if err != nil {
					break
				}
				next = max(next, r.Offset+1)
				if cr, err := protocol.ReadControlRecord(r); err == nil && cr.Type == 0 { // 0: abort marker
					delete(open, b.ProducerID)
				}
			}
			continue
		case *protocol.RecordBatch:
			epoch = b.PartitionLeaderEpoch
			for len(aborted) > 0 && aborted[0].FirstOffset <= b.BaseOffset {
				open[aborted[0].ProducerID] = true
				aborted = aborted[1:]
			}
			skip = b.Attributes.Transactional() && open[b.ProducerID]
		}
		for {
			r, err := b.ReadRecord()
			if err != nil {
				break
			}
			if r.Offset < offset || skip {
				next = max(next, r.Offset+1)
				closeRecord(r)
				continue
			}
			key, kerr := protocol.ReadAll(r.Key)
			value, verr := protocol.ReadAll(r.Value)
			closeRecord(r)
			if err := errors.Join(kerr, verr); err != nil {
				return recs, next, fmt.Errorf("reading record %d of %s/%d: %w", r.Offset, f.topic, f.partition, err)
			}
			var hs []protocol.Header
			if len(r.Headers) > 0 {
				hs = slices.Clone(r.Headers)
			}
			recs = append(recs, record{offset: r.Offset, epoch: epoch, time: r.Time, key: key, value: value, headers: hs})
			next = max(next, r.Offset+1)
		}
	}
	if next == offset && len(batches) > 0 {
		// Batches, but none past offset: an empty batch left by
		// compaction, whose end kafka-go does not read.
		return recs, next, fmt.Errorf("fetch of %s/%d at offset %d: %w", f.topic, f.partition, offset, io.ErrNoProgress)
	}
	return recs, next, nil
}

func closeRecord(r *protocol.Record) {
	if r.Key != nil {
		r.Key.Close()
	}
	if r.Value != nil {
		r.Value.Close()
	}
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
// the claim ends, waiting while the claim is paused or its buffer full.
// After any error it drops the connection and connects again after a
// backoff that grows with the failures since the last successful read.
func (cl *claim) fetchLoop(offset int64) {
	var (
		f       = &cl.f
		ctx     = cl.ctx
		attempt int      // failures since the last successful read
		recs    []record // the slice the next answer is read into
		fails   failures
		health  = &cl.g.c.fetchProblems
		part    = kafkaadapter.Partition{Topic: cl.key.topic, Partition: cl.key.partition}
	)
	defer health.Clear(part) // the partition's next claim reports its own
	// failed notes a failure: it is logged when it is new or every
	// errLogEvery, and it ends Run once it has lasted permanentAfter, if it
	// is one that can last (the topic unknown, not authorized).
	failed := func(what string, level slog.Level, err error) bool {
		attempt++
		now := time.Now()
		log, lasting := fails.note(err, now)
		health.Set(part, err, fails.since)
		if log {
			f.log.Log(ctx, level, what, "topic", f.topic, "partition", f.partition, "offset", offset, "try", attempt,
				"delay", backoff(attempt), "error", err, "repeats", fails.repeats, "since", fails.since)
			fails.logged, fails.repeats = now, 0
		}
		if lasting >= permanentAfter && canLast(err) {
			err = fmt.Errorf("kafkago: fetching %s/%d has failed for %v: %w", f.topic, f.partition, lasting.Round(time.Second), err)
			f.log.Error("redeliver: consumer stopped by a fetch error", "error", err)
			cl.g.fail(err)
			return false
		}
		return true
	}
	for {
		if !cl.buf.WaitRoom(ctx) {
			return
		}
		if attempt > 0 && !sleep(ctx, backoff(attempt)) {
			return
		}
		if !f.connected() {
			start, err := f.connect(ctx, offset)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				if !failed("redeliver: connecting to the partition leader failed, will try again", slog.LevelWarn, err) {
					return
				}
				continue
			}
			offset = start
		}
		if recs == nil {
			recs = cl.slice()
		}
		var err error
		recs, offset, err = f.read(offset, recs[:0])
		if len(recs) > 0 {
			cl.push(recs) // the buffer keeps the slice
			recs = nil
		}
		if err == nil {
			// Past the answer's transaction markers and aborted
			// records, if it ended with some: the claim's Position.
			cl.skip(offset)
			cl.setEnd(f.end)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			if attempt > 0 && fails.err != "" {
				f.log.Info("redeliver: fetching the partition works again", "topic", f.topic, "partition", f.partition,
					"offset", offset, "error_was", fails.err, "for", time.Since(fails.since).Round(time.Millisecond))
				health.Clear(part)
			}
			attempt = 0
			fails = failures{}
			continue
		}
		level := slog.LevelWarn
		var kerr kafka.Error
		if errors.As(err, &kerr) && kerr.Temporary() {
			level = slog.LevelInfo // the leader moved, the topic is being created, ...
		}
		if !failed("redeliver: fetch failed, reconnecting to the partition leader", level, err) {
			return
		}
		f.drop()
	}
}

// How a partition's fetcher reports failures: a failure is logged when it
// differs from the one before and then at most once per errLogEvery, with
// how often it came meanwhile; a failure that can last (the topic unknown,
// not authorized) and has lasted permanentAfter, with no successful read
// in between, ends Run with that error.
var (
	errLogEvery    = 30 * time.Second
	permanentAfter = time.Minute
)

// failures is a partition's run of failed connects and reads since its
// last successful read.
type failures struct {
	err     string    // the last failure's text
	since   time.Time // when failures of this text began
	logged  time.Time // when it was last logged
	repeats int       // since it was last logged
}

// note notes err and reports whether to log it, and how long failures
// like it have lasted.
func (fs *failures) note(err error, now time.Time) (log bool, lasting time.Duration) {
	if text := err.Error(); text != fs.err || fs.since.IsZero() {
		// Connects and reads fail with texts of their own: a
		// failure that can last is the same whichever step met it.
		if !(canLast(err) && fs.err != "" && sameCode(err, fs.err)) {
			fs.since = now
		}
		fs.err = text
		return true, now.Sub(fs.since)
	}
	fs.repeats++
	return now.Sub(fs.logged) >= errLogEvery, now.Sub(fs.since)
}

// lastingCodes are the errors a partition's fetches can meet for as long as
// an operator does nothing: its topic does not exist, or the consumer may
// not read it.
var lastingCodes = []kafka.Error{kafka.UnknownTopicOrPartition, kafka.TopicAuthorizationFailed, kafka.UnknownTopicID}

// canLast reports whether err is one of lastingCodes.
func canLast(err error) bool {
	for _, code := range lastingCodes {
		if errors.Is(err, code) {
			return true
		}
	}
	return false
}

// sameCode reports whether err and the failure text prev name the same of
// lastingCodes.
func sameCode(err error, prev string) bool {
	for _, code := range lastingCodes {
		if errors.Is(err, code) && strings.Contains(prev, code.Error()) {
			return true
		}
	}
	return false
}
