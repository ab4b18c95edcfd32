package conformance

import (
	"encoding/binary"
	"net"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFrontRewrite: every answer that names a broker, at the versions
// before and after its layout changed, comes back naming the front's
// listener for it, its header (correlation ID, tagged fields) kept; an
// answer that names none comes back byte for byte.
func TestFrontRewrite(t *testing.T) {
	f := NewFront(t, nil)
	const host, port = "10.1.2.3", 9092
	want, err := f.listener(net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		key, v  int16
		resp    kmsg.Response
		brokers func(kmsg.Response) [][2]any // host, port of each broker named
	}{
		{"Metadata v1", 3, 1, &kmsg.MetadataResponse{Brokers: []kmsg.MetadataResponseBroker{{NodeID: 1, Host: host, Port: port}}}, metadataBrokers},
		{"Metadata v12", 3, 12, &kmsg.MetadataResponse{Brokers: []kmsg.MetadataResponseBroker{{NodeID: 1, Host: host, Port: port}}}, metadataBrokers},
		{"FindCoordinator v2", 10, 2, &kmsg.FindCoordinatorResponse{NodeID: 1, Host: host, Port: port}, func(r kmsg.Response) [][2]any {
			x := r.(*kmsg.FindCoordinatorResponse)
			return [][2]any{{x.Host, x.Port}}
		}},
		{"FindCoordinator v4", 10, 4, &kmsg.FindCoordinatorResponse{Coordinators: []kmsg.FindCoordinatorResponseCoordinator{{Key: "g", NodeID: 1, Host: host, Port: port}}}, func(r kmsg.Response) [][2]any {
			x := r.(*kmsg.FindCoordinatorResponse)
			return [][2]any{{x.Coordinators[0].Host, x.Coordinators[0].Port}}
		}},
		{"DescribeCluster v1", 60, 1, &kmsg.DescribeClusterResponse{Brokers: []kmsg.DescribeClusterResponseBroker{{NodeID: 1, Host: host, Port: port}}}, func(r kmsg.Response) [][2]any {
			x := r.(*kmsg.DescribeClusterResponse)
			return [][2]any{{x.Brokers[0].Host, x.Brokers[0].Port}}
		}},
		{"Fetch v16", 1, 16, &kmsg.FetchResponse{Brokers: []kmsg.FetchResponseBroker{{NodeID: 1, Host: host, Port: port}}}, func(r kmsg.Response) [][2]any {
			x := r.(*kmsg.FetchResponse)
			return [][2]any{{x.Brokers[0].Host, x.Brokers[0].Port}}
		}},
		{"Produce v10", 0, 10, &kmsg.ProduceResponse{Brokers: []kmsg.ProduceResponseBroker{{NodeID: 1, Host: host, Port: port}}}, func(r kmsg.Response) [][2]any {
			x := r.(*kmsg.ProduceResponse)
			return [][2]any{{x.Brokers[0].Host, x.Brokers[0].Port}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.resp.SetVersion(c.v)
			frame := responseFrame(77, c.resp)
			out := f.rewrite(frame, c.key, c.v)
			if got := binary.BigEndian.Uint32(out); int(got) != len(out)-4 {
				t.Fatalf("size %d for a frame of %d bytes", got, len(out)-4)
			}
			if corr := int32(binary.BigEndian.Uint32(out[4:])); corr != 77 {
				t.Fatalf("correlation ID %d, want 77", corr)
			}
			head := 8
			if c.resp.IsFlexible() {
				head++ // no tagged fields: one byte
			}
			back := kmsg.ResponseForKey(c.key)
			back.SetVersion(c.v)
			if err := back.ReadFrom(out[head:]); err != nil {
				t.Fatalf("the rewritten answer does not read back: %v", err)
			}
			for _, b := range c.brokers(back) {
				if got := net.JoinHostPort(b[0].(string), strconv.Itoa(int(b[1].(int32)))); got != want {
					t.Errorf("broker %s, want the front's %s", got, want)
				}
			}
		})
	}
	// An answer naming no broker, and one the front does not read, pass as
	// they came.
	for _, c := range []struct {
		key, v int16
		resp   kmsg.Response
	}{
		{1, 15, &kmsg.FetchResponse{}},
		{8, 8, &kmsg.OffsetCommitResponse{}},
		{3, 12, &kmsg.MetadataResponse{}},
	} {
		c.resp.SetVersion(c.v)
		frame := responseFrame(5, c.resp)
		if out := f.rewrite(frame, c.key, c.v); string(out) != string(frame) {
			t.Errorf("key %d v%d: the frame changed", c.key, c.v)
		}
	}
}

func metadataBrokers(r kmsg.Response) [][2]any {
	var out [][2]any
	for _, b := range r.(*kmsg.MetadataResponse).Brokers {
		out = append(out, [2]any{b.Host, b.Port})
	}
	return out
}

// responseFrame encodes resp as a broker sends it: size, correlation ID,
// empty tagged fields for a flexible version, the body.
func responseFrame(corr int32, resp kmsg.Response) []byte {
	b := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(b[4:], uint32(corr))
	if resp.IsFlexible() {
		b = append(b, 0)
	}
	b = resp.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}
