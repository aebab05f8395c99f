//go:build unix

package hiddenstates

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPublishRenamesAVerifiedFile(t *testing.T) {
	dir := t.TempDir()
	tokens := ids(20)
	file := encoded(t, tokens, 2, 16, "BF16", value)
	src, dst := filepath.Join(dir, "req-1.safetensors"), filepath.Join(dir, Name(7))
	writeFile(t, src, file)
	s, err := Publish(src, dst, Want{TokenIDs: tokens, Layers: 2, Hidden: 16, DType: "BF16"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, file) || s.Bytes != int64(len(file)) {
		t.Fatalf("published %d bytes (%v), summary %+v", len(got), err, s)
	}
	if _, err := os.Stat(src); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("source still there: %v", err)
	}
}

// A file that fails verification is never published: dst stays absent
// and the source is left for the caller to remove.
func TestPublishLeavesABadFile(t *testing.T) {
	dir := t.TempDir()
	tokens := ids(20)
	file := encoded(t, tokens, 2, 16, "BF16", value)
	src, dst := filepath.Join(dir, "req-1.safetensors"), filepath.Join(dir, Name(7))
	writeFile(t, src, file[:len(file)-10])
	_, err := Publish(src, dst, Want{TokenIDs: tokens, Layers: 2, Hidden: 16, DType: "BF16"})
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("a cut file: %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dst: %v, want none", err)
	}
	if _, err := os.Stat(src); err != nil {
		t.Errorf("src: %v, want it left", err)
	}
}

// Across file systems the file is copied as it is verified, then
// linked; a bad one leaves no partial file beside dst.
func TestCopyVerified(t *testing.T) {
	srcDir, dstDir := t.TempDir(), t.TempDir()
	tokens := ids(20)
	file := encoded(t, tokens, 2, 16, "BF16", value)
	want := Want{TokenIDs: tokens, Layers: 2, Hidden: 16, DType: "BF16"}
	for _, c := range []struct {
		name string
		data []byte
		ok   bool
	}{{"good", file, true}, {"cut", file[:len(file)-3], false}} {
		src := filepath.Join(srcDir, c.name)
		writeFile(t, src, c.data)
		f, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dstDir, c.name+".safetensors")
		tmp, _, err := copyVerified(f, dst, want)
		f.Close()
		if err == nil {
			_, err = link(tmp, dst, Summary{}, want)
			os.Remove(tmp)
		}
		got, rerr := os.ReadFile(dst)
		switch {
		case c.ok && (err != nil || !bytes.Equal(got, file)):
			t.Errorf("%s: %v, %d bytes published", c.name, err, len(got))
		case !c.ok && (err == nil || rerr == nil):
			t.Errorf("%s: %v; published: %v", c.name, err, rerr == nil)
		}
	}
	entries, _ := os.ReadDir(dstDir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".partial") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	if same, err := sameFileSystem(filepath.Join(srcDir, "good"), dstDir); err != nil || !same {
		t.Errorf("two temp directories: same file system %v, %v", same, err)
	}
}

// The first attempt to publish a sample wins: a second finds the file,
// reports it (its checksum, not its own file's) and removes its own.
func TestPublishNeverReplacesAPublishedFile(t *testing.T) {
	dir := t.TempDir()
	tokens := ids(20)
	want := Want{TokenIDs: tokens, Layers: 2, Hidden: 16, DType: "BF16"}
	first := encoded(t, tokens, 2, 16, "BF16", value)
	// The same sample extracted again, with other numerics.
	second := encoded(t, tokens, 2, 16, "BF16", func(tok int64, pos, layer, h int) float32 { return value(tok, pos, layer, h) + 1 })
	dst := filepath.Join(dir, Name(3))
	a, b := filepath.Join(dir, "req-a.safetensors"), filepath.Join(dir, "req-b.safetensors")
	writeFile(t, a, first)
	writeFile(t, b, second)
	pa, err := Publish(a, dst, want)
	if err != nil || pa.Existed {
		t.Fatalf("first: %+v, %v", pa, err)
	}
	pb, err := Publish(b, dst, want)
	if err != nil || !pb.Existed || pb.SHA256 != pa.SHA256 {
		t.Fatalf("second: %+v, %v; want the first's file reported (%s)", pb, err, pa.SHA256)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, first) {
		t.Error("the published file was replaced")
	}
	for _, p := range []string{a, b} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
}

// A published file damaged since (cut short) is replaced by a good one.
func TestPublishReplacesADamagedFile(t *testing.T) {
	dir := t.TempDir()
	tokens := ids(20)
	want := Want{TokenIDs: tokens, Layers: 2, Hidden: 16, DType: "BF16"}
	file := encoded(t, tokens, 2, 16, "BF16", value)
	dst, src := filepath.Join(dir, Name(3)), filepath.Join(dir, "req.safetensors")
	writeFile(t, dst, file[:100])
	writeFile(t, src, file)
	p, err := Publish(src, dst, want)
	if err != nil || p.Existed {
		t.Fatalf("%+v, %v", p, err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, file) {
		t.Error("the damaged file is still there")
	}
}

// WaitWritten waits while the writer holds the lock exclusively, and
// returns with it shared once the writer lets go.
func TestWaitWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "req.safetensors")
	lock, err := os.Create(LockName(path))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := WaitWritten(ctx, path, 10*time.Millisecond); err == nil || !strings.Contains(err.Error(), "still holds") {
		t.Fatalf("while the writer holds the lock: %v", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	release, err := WaitWritten(context.Background(), path, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Held shared: the writer cannot take it back meanwhile.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Errorf("exclusive lock while the reader holds it shared: %v", err)
	}
	release()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("exclusive lock after release: %v", err)
	}
	if release, err := WaitWritten(context.Background(), filepath.Join(t.TempDir(), "unlocked"), time.Millisecond); err != nil {
		t.Errorf("a file without a lock: %v", err)
	} else {
		release()
	}
}

// shmDir is a directory on another file system than the test's temp
// directory (tmpfs at /dev/shm), or "" when there is none.
func shmDir(t testing.TB) string {
	d, err := os.MkdirTemp("/dev/shm", "aerie-hs-")
	if err != nil {
		return ""
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if same, err := sameFileSystem(d, os.TempDir()); err != nil || same {
		return ""
	}
	return d
}

func TestPublishAcrossFileSystems(t *testing.T) {
	shm := shmDir(t)
	if shm == "" {
		t.Skip("no tmpfs at /dev/shm apart from the temp directory: the copy is tested by TestCopyVerified")
	}
	tokens := ids(20)
	file := encoded(t, tokens, 2, 16, "BF16", value)
	src, dst := filepath.Join(shm, "req-1.safetensors"), filepath.Join(t.TempDir(), Name(3))
	writeFile(t, src, file)
	if _, err := Publish(src, dst, Want{TokenIDs: tokens, Layers: 2, Hidden: 16, DType: "BF16"}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, file) {
		t.Fatalf("published %d bytes: %v", len(got), err)
	}
	if _, err := os.Stat(src); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("source still there: %v", err)
	}
}

// BenchmarkPublish is verification and publishing of a 256 MiB BF16
// file (4 layers of 7,168), the file written anew (untimed) before each:
// renamed within the temp directory's file system, and copied from
// tmpfs to it with an fsync. b.SetBytes makes the figure bytes of file a
// second.
func BenchmarkPublish(b *testing.B) {
	const layers, hidden = 4, 7168
	tokens := ids(256 << 20 / (layers * hidden * 2))
	file := encoded(b, tokens, layers, hidden, "BF16", value)
	want := Want{TokenIDs: tokens, Layers: layers, Hidden: hidden, DType: "BF16"}
	run := func(b *testing.B, srcDir string) {
		dstDir := b.TempDir()
		b.SetBytes(int64(len(file)))
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			src := filepath.Join(srcDir, "req.safetensors")
			if err := os.WriteFile(src, file, 0o644); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := Publish(src, filepath.Join(dstDir, Name(i)), want); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("rename", func(b *testing.B) { run(b, b.TempDir()) })
	b.Run("copy", func(b *testing.B) {
		shm := shmDir(b)
		if shm == "" {
			b.Skip("no tmpfs at /dev/shm apart from the temp directory")
		}
		run(b, shm)
	})
}
