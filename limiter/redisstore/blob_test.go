package redisstore

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
)

// TestBlobs stores, lists, stats and deletes values, and checks that a lock has one
// holder at a time, that only its holder releases or extends it, and that it frees
// itself when its lease ends.
func TestBlobs(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newStore(t, Config{URL: srv.URL()})
	b := st.Blobs("h3edge:acme:")
	ctx := context.Background()

	if _, err := b.Get(ctx, "certificates/x.crt"); !errors.Is(err, ErrNoBlob) {
		t.Fatalf("Get of a missing blob: %v, want ErrNoBlob", err)
	}
	before := time.Now().Add(-time.Second)
	for _, n := range []string{"certificates/b/b.crt", "certificates/a/a.crt", "acme/users/x.json"} {
		if err := b.Put(ctx, n, []byte("value of "+n)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.Get(ctx, "certificates/a/a.crt")
	if err != nil || string(got) != "value of certificates/a/a.crt" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	names, err := b.List(ctx, "certificates/")
	if want := []string{"certificates/a/a.crt", "certificates/b/b.crt"}; err != nil || !slices.Equal(names, want) {
		t.Fatalf("List = %q, %v; want %q", names, err, want)
	}
	size, mod, err := b.Stat(ctx, "acme/users/x.json")
	if err != nil || size != int64(len("value of acme/users/x.json")) || mod.Before(before) {
		t.Fatalf("Stat = %d, %v, %v", size, mod, err)
	}
	if err := b.Delete(ctx, "certificates/a/a.crt"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Stat(ctx, "certificates/a/a.crt"); !errors.Is(err, ErrNoBlob) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after Delete: %v, want ErrNoBlob", err)
	}
	if names, _ := b.List(ctx, ""); len(names) != 2 {
		t.Fatalf("List after Delete = %q", names)
	}
	if n, _ := st.rdb.Exists(ctx, "h3edge:acme:blob:acme/users/x.json", "h3edge:acme:index").Result(); n != 2 {
		t.Fatalf("keys under h3edge:acme: = %d of 2", n)
	}

	tok, ok, err := b.TryLock(ctx, "issue_cert_x", 300*time.Millisecond)
	if err != nil || !ok {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	if _, ok, _ := b.TryLock(ctx, "issue_cert_x", time.Second); ok {
		t.Fatal("a second TryLock took a held lock")
	}
	if ok, _ := b.Unlock(ctx, "issue_cert_x", "not-the-token"); ok {
		t.Fatal("Unlock with another token released the lock")
	}
	if ok, _ := b.Extend(ctx, "issue_cert_x", "not-the-token", time.Minute); ok {
		t.Fatal("Extend with another token extended the lock")
	}
	if ok, err := b.Extend(ctx, "issue_cert_x", tok, time.Minute); err != nil || !ok {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	if ttl := st.rdb.PTTL(ctx, "h3edge:acme:lock:issue_cert_x").Val(); ttl < 30*time.Second {
		t.Fatalf("lease after Extend = %v", ttl)
	}
	if ok, err := b.Unlock(ctx, "issue_cert_x", tok); err != nil || !ok {
		t.Fatalf("Unlock = %v, %v", ok, err)
	}
	if _, ok, _ := b.TryLock(ctx, "issue_cert_x", 50*time.Millisecond); !ok {
		t.Fatal("TryLock after Unlock failed")
	}
	// The lease ends on its own: poll until another holder can take it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok, _ := b.TryLock(ctx, "issue_cert_x", time.Second); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lock never freed itself after its lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
