package hiddenstates

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Publish puts the extraction file at src under its final name dst once
// it is verified against w, so that a file at dst is always a whole,
// checked sample. Within one file system the verified file is renamed;
// across file systems it is copied while it is verified, to a temporary
// name beside dst, fsynced, then renamed, and src is removed. The
// directory of dst is fsynced either way, so that the name survives a
// crash. A file that fails verification is an *Error and is left at src
// (the caller removes it); dst is then untouched.
func Publish(src, dst string, w Want) (Summary, error) {
	f, err := os.Open(src)
	if err != nil {
		return Summary{}, fmt.Errorf("publish %s: %w", src, err)
	}
	defer f.Close()
	dir := filepath.Dir(dst)
	same, err := sameFileSystem(src, dir)
	if err != nil {
		return Summary{}, fmt.Errorf("publish %s to %s: %w", src, dir, err)
	}
	var s Summary
	if same {
		if s, err = Verify(f, w); err != nil {
			return Summary{}, err
		}
		if err := os.Rename(src, dst); err != nil {
			return Summary{}, fmt.Errorf("publish %s: %w", src, err)
		}
	} else if s, err = copyVerified(f, dst, w); err != nil {
		return Summary{}, err
	}
	if err := syncDir(dir); err != nil {
		return Summary{}, fmt.Errorf("publish %s: %w", dst, err)
	}
	if !same {
		if err := os.Remove(src); err != nil && !errors.Is(err, os.ErrNotExist) {
			return s, fmt.Errorf("published %s; remove %s: %w", dst, src, err)
		}
	}
	return s, nil
}

// copyVerified copies f to a temporary file beside dst as it verifies
// it, fsyncs it and renames it to dst; a file that fails is removed.
func copyVerified(f *os.File, dst string, w Want) (Summary, error) {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*.partial")
	if err != nil {
		return Summary{}, fmt.Errorf("publish %s: %w", dst, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	s, err := Verify(io.TeeReader(f, tmp), w)
	if err != nil {
		return Summary{}, err
	}
	if err := tmp.Sync(); err != nil {
		return Summary{}, fmt.Errorf("publish %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return Summary{}, fmt.Errorf("publish %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return Summary{}, fmt.Errorf("publish %s: %w", dst, err)
	}
	done = true
	return s, nil
}

// syncDir fsyncs a directory, so that the names in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// LockName is the companion lock of an extraction file: its writer holds
// it exclusively until the file is written, so a reader that takes it
// shared finds the file whole.
func LockName(path string) string { return path + ".lock" }

// WaitWritten waits until the writer of the extraction file at path has
// released its lock, trying every poll until ctx ends, and returns with
// the lock held shared: release it with the returned function once the
// file is published. A file without a lock file is taken as written.
func WaitWritten(ctx context.Context, path string, poll time.Duration) (release func(), err error) {
	lf, err := os.Open(LockName(path))
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wait for %s: %w", path, err)
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		ok, err := tryShared(lf)
		if err != nil {
			lf.Close()
			return nil, fmt.Errorf("wait for %s: %w", path, err)
		}
		if ok {
			return func() { unlock(lf); lf.Close() }, nil
		}
		select {
		case <-ctx.Done():
			lf.Close()
			return nil, fmt.Errorf("wait for %s: its writer still holds %s: %w", path, LockName(path), context.Cause(ctx))
		case <-t.C:
		}
	}
}
