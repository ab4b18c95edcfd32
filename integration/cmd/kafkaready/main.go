// Command kafkaready tells whether a Kafka broker answers: it sends one
// Metadata request (v7) and, with -group, one FindCoordinator request (v2)
// for that group, which also makes the broker create __consumer_offsets, so
// the first test that joins a group does not wait for it.
//
// It uses the standard library only (the requests are encoded by hand), so
// it builds in any module without extra requirements. integration/kafka.sh
// runs it in a loop until it succeeds.
//
// Exit status: 0 when the broker is ready, 1 when it is not (yet), 2 on
// bad usage.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	addr := flag.String("broker", "127.0.0.1:9092", "broker address host:port")
	group := flag.String("group", "", "also ask for this group's coordinator (empty: skip)")
	timeout := flag.Duration("timeout", 3*time.Second, "bound for the whole check")
	quiet := flag.Bool("q", false, "print nothing on success")
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := check(*addr, *group, *timeout, *quiet); err != nil {
		fmt.Fprintln(os.Stderr, "kafkaready:", err)
		os.Exit(1)
	}
}

func check(addr, group string, timeout time.Duration, quiet bool) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	c := &client{conn: conn, r: bufio.NewReader(conn)}

	// Metadata v7, no topics (a null array means all topics; an empty one
	// means none), no auto creation.
	var body []byte
	body = binary.BigEndian.AppendUint32(body, 0) // topics: empty array
	body = append(body, 0)                        // allow_auto_topic_creation
	resp, err := c.roundTrip(3, 7, body)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	d := &decoder{b: resp}
	d.int32() // throttle_time_ms
	type broker struct {
		id   int32
		host string
		port int32
	}
	var brokers []broker
	for n := d.int32(); n > 0 && d.err == nil; n-- {
		var b broker
		b.id, b.host, b.port = d.int32(), d.string(), d.int32()
		d.string() // rack
		brokers = append(brokers, b)
	}
	cluster := d.string()
	controller := d.int32()
	if d.err != nil {
		return fmt.Errorf("metadata response: %w", d.err)
	}
	if len(brokers) == 0 {
		return errors.New("metadata: no brokers yet")
	}
	if controller < 0 {
		return errors.New("metadata: no controller yet")
	}
	var listed []string
	for _, b := range brokers {
		listed = append(listed, fmt.Sprintf("%d@%s:%d", b.id, b.host, b.port))
	}
	msg := fmt.Sprintf("metadata: cluster %s, controller %d, brokers %s", cluster, controller, strings.Join(listed, ","))

	if group != "" {
		// FindCoordinator v2: key, key_type 0 (group).
		body = body[:0]
		body = appendString(body, group)
		body = append(body, 0)
		resp, err := c.roundTrip(10, 2, body)
		if err != nil {
			return fmt.Errorf("find coordinator: %w", err)
		}
		d := &decoder{b: resp}
		d.int32() // throttle_time_ms
		code := d.int16()
		errMsg := d.string()
		node := d.int32()
		if d.err != nil {
			return fmt.Errorf("find coordinator response: %w", d.err)
		}
		if code != 0 {
			return fmt.Errorf("find coordinator for group %q: error code %d %s", group, code, errMsg)
		}
		msg += fmt.Sprintf("; group coordinator %d", node)
	}
	if !quiet {
		fmt.Println(msg)
	}
	return nil
}

type client struct {
	conn net.Conn
	r    *bufio.Reader
	corr int32
}

// roundTrip sends one request with header v1 and returns the response body
// after the v0 response header.
func (c *client) roundTrip(key, version int16, body []byte) ([]byte, error) {
	c.corr++
	var req []byte
	req = binary.BigEndian.AppendUint32(req, 0) // size, set below
	req = binary.BigEndian.AppendUint16(req, uint16(key))
	req = binary.BigEndian.AppendUint16(req, uint16(version))
	req = binary.BigEndian.AppendUint32(req, uint32(c.corr))
	req = appendString(req, "redeliver-kafkaready")
	req = append(req, body...)
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	if _, err := c.conn.Write(req); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > 64<<20 {
		return nil, fmt.Errorf("bad response size %d", n)
	}
	resp := make([]byte, n)
	if _, err := io.ReadFull(c.r, resp); err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(resp)); got != c.corr {
		return nil, fmt.Errorf("correlation id %d, want %d", got, c.corr)
	}
	return resp[4:], nil
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b) < n {
		d.err = io.ErrUnexpectedEOF
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) int16() int16 {
	p := d.take(2)
	if p == nil {
		return 0
	}
	return int16(binary.BigEndian.Uint16(p))
}

func (d *decoder) int32() int32 {
	p := d.take(4)
	if p == nil {
		return -1
	}
	return int32(binary.BigEndian.Uint32(p))
}

// string reads a nullable string; null reads as "".
func (d *decoder) string() string {
	n := d.int16()
	if d.err != nil || n < 0 {
		return ""
	}
	return string(d.take(int(n)))
}
