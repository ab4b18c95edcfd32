package provider

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// TestContainersUseHostNetworkOnly checks that a provider's container runs
// on the host's network and that testcontainers made no network of its own
// (with no "bridge" network it would otherwise create "reaper_default", a
// bridge with a private-range address).
func TestContainersUseHostNetworkOnly(t *testing.T) {
	srv := tcPostgres.get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ins, err := srv.ctr.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if mode := ins.HostConfig.NetworkMode; mode != "host" {
		t.Errorf("network mode %q, want host", mode)
	}
	if ins.HostConfig.Init == nil || !*ins.HostConfig.Init {
		t.Errorf("no init process: the stop signal would not reach the server")
	}
	p, err := hostProvider()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	nets, err := p.Client().NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets.Items {
		if n.Labels["org.testcontainers"] != "" || n.Name == "reaper_default" {
			t.Errorf("testcontainers created network %q (driver %s)", n.Name, n.Driver)
		}
	}
	for name := range ins.NetworkSettings.Networks {
		if name != "host" {
			t.Errorf("the container joined network %q", name)
		}
	}
}
