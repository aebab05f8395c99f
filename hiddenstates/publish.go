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
// checked sample. It never replaces a file at dst: the first attempt to
// publish a sample wins, and a later one (a redelivery, a second worker
// on the same disk) finds that file, verifies it in turn, removes its own
// and reports the published one (Published.Existed), so that every
// result names the file that is there. Within one file system the
// verified file gets its final name by a hard link; across file systems
// it is copied while it is verified, to a temporary name beside dst,
// fsynced, then linked. The directory of dst is fsynced either way, so
// that the name survives a crash, and src is removed. A file that fails
// verification is an *Error and is left at src (the caller removes it);
// dst is then untouched. A file at dst that fails verification (one
// damaged after it was published) is replaced.
func Publish(src, dst string, w Want) (Published, error) {
	f, err := os.Open(src)
	if err != nil {
		return Published{}, fmt.Errorf("publish %s: %w", src, err)
	}
	defer f.Close()
	dir := filepath.Dir(dst)
	same, err := sameFileSystem(src, dir)
	if err != nil {
		return Published{}, fmt.Errorf("publish %s to %s: %w", src, dir, err)
	}
	name := src
	var s Summary
	if same {
		if s, err = Verify(f, w); err != nil {
			return Published{}, err
		}
	} else {
		if name, s, err = copyVerified(f, dst, w); err != nil {
			return Published{}, err
		}
		defer os.Remove(name)
	}
	p, err := link(name, dst, s, w)
	if err != nil {
		return Published{}, err
	}
	if err := os.Remove(src); err != nil && !errors.Is(err, os.ErrNotExist) {
		return p, fmt.Errorf("published %s; remove %s: %w", dst, src, err)
	}
	return p, nil
}

// Published is a sample's file under its final name.
type Published struct {
	Summary
	// Existed is set when an earlier attempt had published the file, and
	// Summary is that file's.
	Existed bool
}

// link gives the verified file at name, of summary s, the name dst
// unless dst exists already and verifies.
func link(name, dst string, s Summary, w Want) (Published, error) {
	for range 2 {
		err := os.Link(name, dst)
		if err == nil {
			if err := syncDir(filepath.Dir(dst)); err != nil {
				return Published{}, fmt.Errorf("publish %s: %w", dst, err)
			}
			return Published{Summary: s}, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return Published{}, fmt.Errorf("publish %s: %w", dst, err)
		}
		there, verr := VerifyFile(dst, w)
		if verr == nil {
			return Published{Summary: there, Existed: true}, nil
		}
		var bad *Error
		if !errors.As(verr, &bad) {
			return Published{}, fmt.Errorf("publish %s: a file is there and cannot be read: %w", dst, verr)
		}
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return Published{}, fmt.Errorf("publish %s: replace a damaged file: %w", dst, err)
		}
	}
	return Published{}, fmt.Errorf("publish %s: another attempt publishes a damaged file there at the same time", dst)
}

// VerifyFile verifies the file at path against w (see Verify).
func VerifyFile(path string, w Want) (Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return Summary{}, err
	}
	defer f.Close()
	return Verify(f, w)
}

// copyVerified copies f to a temporary file beside dst as it verifies
// it, fsyncs it and returns its name; a file that fails is removed.
func copyVerified(f *os.File, dst string, w Want) (string, Summary, error) {
	tmp, err := os.CreateTemp(filepath.Dir(dst), PartialPrefix+filepath.Base(dst)+".*"+PartialSuffix)
	if err != nil {
		return "", Summary{}, fmt.Errorf("publish %s: %w", dst, err)
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
		return "", Summary{}, err
	}
	if err := tmp.Sync(); err != nil {
		return "", Summary{}, fmt.Errorf("publish %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return "", Summary{}, fmt.Errorf("publish %s: %w", dst, err)
	}
	done = true
	return tmp.Name(), s, nil
}

// A copy under way across file systems is named
// PartialPrefix<final name>.<random>PartialSuffix beside its final name;
// one a killed worker left is removed once the run is done.
const (
	PartialPrefix = "."
	PartialSuffix = ".partial"
)

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
