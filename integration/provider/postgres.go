package provider

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"
)

// PostgresServer is a PostgreSQL server in a container: user postgres,
// no password (trust authentication), on 127.0.0.1.
type PostgresServer struct {
	// Addr is the server's host:port.
	Addr string
	ctr  testcontainers.Container
}

func (s PostgresServer) String() string { return "postgres at " + s.Addr }

var tcPostgres = &shared[PostgresServer]{
	name:     "testcontainers-postgres",
	image:    PostgresImage,
	imageEnv: EnvPostgresImage,
	missing:  "build it with integration/images.sh build (scripts/test.sh does)",
	run:      runPostgres,
}

var dbSeq atomic.Int64

// Postgres returns the connection URL of a new, empty database for t alone
// (postgres://postgres@127.0.0.1:<port>/<name>?sslmode=disable), on the
// PostgreSQL server that the tests of this test binary share: a container
// of PostgresImage through testcontainers-go, with host networking. The
// server starts at the first call; the binary's TestMain removes it with
// [Terminate]. Where no Docker engine answers, or the image is not in it,
// t skips and says why.
func Postgres(t testing.TB) string {
	t.Helper()
	srv := tcPostgres.get(t)
	name := dbName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := psql(ctx, srv.ctr, srv.Addr, "postgres", `CREATE DATABASE "`+name+`"`); err != nil {
		t.Fatalf("postgres: create database %s: %v\n%s", name, err, out)
	}
	return "postgres://postgres@" + srv.Addr + "/" + name + "?sslmode=disable"
}

var unsafeName = regexp.MustCompile(`[^a-z0-9_]+`)

// dbName makes a database name from a test's name: lower case, at most 63
// bytes, unique in the binary.
func dbName(test string) string {
	n := unsafeName.ReplaceAllString(strings.ToLower(test), "_")
	suffix := "_" + strconv.FormatInt(dbSeq.Add(1), 10)
	if len(n) > 40 {
		n = n[:40]
	}
	return "t_" + strings.Trim(n, "_") + suffix
}

// execer runs a command in a container: a testcontainers.Container, or a
// wait strategy's target.
type execer interface {
	Exec(ctx context.Context, cmd []string, options ...tcexec.ProcessOption) (int, io.Reader, error)
}

// psql runs one statement through psql in the container, over TCP to the
// server's loopback address, and returns its output.
func psql(ctx context.Context, c execer, addr, db, sql string) (string, error) {
	host, port, _ := net.SplitHostPort(addr)
	code, r, err := c.Exec(ctx, []string{"psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", host, "-p", port,
		"-U", "postgres", "-d", db, "-tAc", sql}, tcexec.Multiplexed())
	var out []byte
	if r != nil {
		out, _ = io.ReadAll(r)
	}
	if err == nil && code != 0 {
		err = fmt.Errorf("psql exited with %d", code)
	}
	return string(out), err
}

func runPostgres(ctx context.Context, image string) (testcontainers.Container, PostgresServer, error) {
	ports, err := freePorts(pgPortLow, pgPortHigh, 1)
	if err != nil {
		return nil, PostgresServer{}, err
	}
	port := strconv.Itoa(ports[0])
	addr := net.JoinHostPort("127.0.0.1", port)
	// SIGINT: PostgreSQL's fast shutdown (SIGTERM would wait for every
	// client to disconnect).
	req := hostRequest(image, "SIGINT", map[string]string{"PGPORT": port},
		untilAnswers{what: "PostgreSQL at " + addr, check: func(ctx context.Context, target wait.StrategyTarget) error {
			out, err := psql(ctx, target, addr, "postgres", "select 1")
			if err == nil && strings.TrimSpace(out) != "1" {
				err = fmt.Errorf("select 1 answered %q", out)
			}
			return err
		}})
	c, err := runHost(ctx, req)
	if err != nil {
		return c, PostgresServer{}, err
	}
	return c, PostgresServer{Addr: addr, ctr: c}, nil
}
