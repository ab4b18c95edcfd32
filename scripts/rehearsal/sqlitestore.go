//go:build ignore

// The SQLite re-drive store: opened (and migrated) in a temporary directory.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
)

func main() {
	dir, err := os.MkdirTemp("", "rehearsal")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "redrive.db"))
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("sqlitestore: ok")
}
