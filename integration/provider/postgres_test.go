package provider_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/redeliver-go/redeliver/integration/provider"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := provider.Terminate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestPostgres connects to the database the provider made, over loopback,
// and finds it answering and empty, and apart from another test's.
func TestPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := connect(t, provider.Postgres(t))
	var one int
	if err := a.QueryRow(ctx, "select 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("select 1: %d, %v", one, err)
	}
	var addr string
	if err := a.QueryRow(ctx, "select host(inet_server_addr())").Scan(&addr); err != nil || addr != "127.0.0.1" {
		t.Errorf("server address %q (%v), want 127.0.0.1", addr, err)
	}
	if _, err := a.Exec(ctx, "create table redeliver_probe (id int primary key)"); err != nil {
		t.Fatal(err)
	}

	b := connect(t, provider.Postgres(t))
	var da, db string
	_ = a.QueryRow(ctx, "select current_database()").Scan(&da)
	_ = b.QueryRow(ctx, "select current_database()").Scan(&db)
	if da == db {
		t.Fatalf("two calls gave the same database %q", da)
	}
	_, err := b.Exec(ctx, "select * from redeliver_probe")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" { // undefined_table
		t.Fatalf("the second database sees the first's table: %v", err)
	}
}
