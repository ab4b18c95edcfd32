package engine

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl"
)

// fetchAheadTimeout bounds one request of fetchAhead: it asks for no wait,
// so the broker answers at once unless something is wrong, and then the
// client's own fetches bring the records anyway.
const fetchAheadTimeout = 5 * time.Second

// fetchAhead feeds a partition that was just resumed in the client until
// the client's own fetches include it again.
//
// franz-go sends one fetch request to a broker at a time, and a request
// leaves out the partitions paused when it was made. When the partitions in
// the request in flight are all caught up, it is a long poll: the broker
// holds it up to the fetch max wait, and a partition resumed meanwhile gets
// nothing until it returns. So, from its resumption until a poll hands the
// claim anything of the partition (even records it already has, or none
// with its high watermark: then the client fetches it again), the claim
// fetches the partition's next records itself, in Fetch requests of its
// own sent to the leader with no wait, whenever its buffer is below half
// its limit. The client's position is still where the pause left it, so its
// next fetches repeat what these got; push knows the offsets it got and
// drops their repeats (a rewind elsewhere is delivered), and the buffer
// stays the partition's stream in order. It stops as well when the
// partition is caught up (a long poll of its own would wait anyway), paused
// again, or ended, or after a failed request (the client's fetches bring the
// records a little later).
//
// It holds g.wg, which it releases.
func (cl *claim) fetchAhead() {
	defer cl.g.wg.Done()
	defer func() {
		cl.mu.Lock()
		cl.ahead = false
		cl.mu.Unlock()
	}()
	for {
		cl.mu.Lock()
		stop := cl.dead || cl.pause != 0 || cl.polled || cl.hwm >= 0 && cl.buf.Last()+1 >= cl.hwm
		need := cl.buf.Size() < cl.c.cfg.BufferBytes/2
		from, topicID := cl.buf.Last()+1, cl.topicID
		cl.mu.Unlock()
		switch {
		case stop:
			return
		case need:
			if !cl.fetchOnce(from, topicID) {
				return
			}
		default:
			select {
			case <-cl.aheadWake:
			case <-cl.ctx.Done():
				return
			}
		}
	}
}

// fetchOnce fetches the partition's records from offset from and pushes
// them; it reports whether that worked.
func (cl *claim) fetchOnce(from int64, topicID [16]byte) bool {
	client := cl.g.cl
	leader, epoch, err := client.PartitionLeader(cl.key.topic, cl.key.partition)
	if err != nil || leader < 0 {
		return false
	}
	side := cl.g.sideClient()
	if side == nil {
		return false
	}
	partBytes, _ := client.OptValue(kgo.FetchMaxPartitionBytes).(int32)
	if partBytes <= 0 {
		partBytes = 1 << 20
	}
	iso := kgo.ReadUncommitted()
	req := kmsg.NewPtrFetchRequest()
	if level, _ := client.OptValue(kgo.FetchIsolationLevel).(int8); level == 1 {
		iso = kgo.ReadCommitted()
		req.IsolationLevel = 1
	}
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = partBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = cl.key.topic, topicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = cl.key.partition
	rp.CurrentLeaderEpoch = epoch
	rp.FetchOffset = from
	rp.PartitionMaxBytes = partBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	ctx, cancel := context.WithTimeout(cl.ctx, fetchAheadTimeout)
	defer cancel()
	kresp, err := side.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		return false
	}
	resp := kresp.(*kmsg.FetchResponse)
	if resp.ErrorCode != 0 {
		return false
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic != cl.key.topic && (t.TopicID != topicID || topicID == [16]byte{}) {
			continue
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if p.Partition != cl.key.partition || p.ErrorCode != 0 {
				continue
			}
			fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
				Offset: from, IsolationLevel: iso, Topic: cl.key.topic, Partition: cl.key.partition,
				KeepControlRecords: true, // skipped by push, which moves the claim's Position past them
			}, p, kgo.DefaultDecompressor(), nil)
			if fp.Err != nil {
				return false
			}
			cl.push(fp.Records, fp.HighWatermark, from)
			return true
		}
	}
	return false
}

// sideClient returns the client that fetchAhead sends its requests with,
// made at the first call; nil if it cannot be made. It is not the
// consumer's client because a broker answers the requests of a connection
// in order, and the consumer's client sends its fetches on one connection
// per broker: a request of fetchAhead would wait behind the long poll it
// goes around. It connects as the consumer's client does (seed brokers,
// dialer, TLS, SASL, client ID, versions) and is closed when the consumer
// stops.
func (g *group) sideClient() *kgo.Client {
	g.sideOnce.Do(func() {
		cl := g.cl
		var opts []kgo.Opt
		if v, _ := cl.OptValue(kgo.SeedBrokers).([]string); len(v) > 0 {
			opts = append(opts, kgo.SeedBrokers(v...))
		}
		if vs := cl.OptValues(kgo.ClientID); len(vs) == 2 {
			if id, _ := vs[0].(string); vs[1] == true {
				opts = append(opts, kgo.ClientID(id))
			}
		}
		if v, _ := cl.OptValue(kgo.Dialer).(func(context.Context, string, string) (net.Conn, error)); v != nil {
			opts = append(opts, kgo.Dialer(v))
		}
		if v, _ := cl.OptValue(kgo.DialTimeout).(time.Duration); v > 0 {
			opts = append(opts, kgo.DialTimeout(v))
		}
		if v, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config); v != nil {
			opts = append(opts, kgo.DialTLSConfig(v))
		}
		if v, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism); len(v) > 0 {
			opts = append(opts, kgo.SASL(v...))
		}
		if v, _ := cl.OptValue(kgo.MaxVersions).(*kversion.Versions); v != nil {
			opts = append(opts, kgo.MaxVersions(v))
		}
		if v, _ := cl.OptValue(kgo.MinVersions).(*kversion.Versions); v != nil {
			opts = append(opts, kgo.MinVersions(v))
		}
		side, err := kgo.NewClient(opts...)
		if err != nil {
			if g.c != nil {
				g.c.log.Warn("redeliver: no client for fetching resumed partitions ahead", "error", err)
			}
			return
		}
		g.side = side
	})
	return g.side
}

// closeSide closes the side client, if one was made; call it once every
// fetchAhead has returned.
func (g *group) closeSide() {
	g.sideOnce.Do(func() {}) // no side client from now on
	if g.side != nil {
		g.side.Close()
	}
}
