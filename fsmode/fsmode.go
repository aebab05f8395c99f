// Package fsmode decides the permissions of the files and directories
// aerie creates. aerie creates them with the widest modes, File and Dir,
// and lets the process umask take away what the operator does not want
// shared: the aerie command sets that umask once at start (--umask,
// default DefaultUmask, so outputs are 0600 and directories 0700). A
// file written to a temporary name and renamed over its destination
// (CreateTemp) gets the same mode, or keeps the mode of the file it
// replaces, so a rewrite never changes what its owner chose.
package fsmode

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const (
	// File is the mode aerie creates files with, before the umask.
	File os.FileMode = 0o666
	// Dir is the mode aerie creates directories with, before the umask.
	Dir os.FileMode = 0o777
	// DefaultUmask keeps everything aerie creates to its owner: prompts,
	// answers and logs are often not for every account on a shared host.
	DefaultUmask = 0o077
)

// ParseUmask reads an octal umask such as "077", "0077" or "0o022":
// three or four octal digits, at most 0777.
func ParseUmask(s string) (int, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.TrimPrefix(t, "0o"), "0O")
	if t == "" {
		return 0, fmt.Errorf("umask %q is empty: give an octal mask such as 0077 (owner only) or 0022 (readable by all)", s)
	}
	n, err := strconv.ParseUint(t, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("umask %q is not octal: give a mask such as 0077 (owner only) or 0022 (readable by all)", s)
	}
	if n > 0o777 {
		return 0, fmt.Errorf("umask %q is above 0777: it holds the permission bits to take away, 0000 to 0777", s)
	}
	return int(n), nil
}

// FormatUmask writes mask as ParseUmask reads it, with four digits.
func FormatUmask(mask int) string { return fmt.Sprintf("%04o", mask) }

// SetUmask sets the process umask and returns the previous one. On
// systems without a umask it does nothing and returns -1. The umask is
// per process: call it once at start, before any goroutine creates files.
func SetUmask(mask int) int { return setUmask(mask) }

// CreateTemp creates a new file in path's directory, named by pattern as
// os.CreateTemp names its files, to be renamed over path once written.
// Its mode is that of path when path exists, so a rewrite keeps the mode
// its owner set; otherwise File less the umask, like every file aerie
// creates (os.CreateTemp's fixed 0600 would ignore --umask).
func CreateTemp(path, pattern string) (*os.File, error) {
	dir := filepath.Dir(path)
	prefix, suffix, _ := strings.Cut(pattern, "*")
	if strings.ContainsRune(pattern, os.PathSeparator) {
		return nil, fmt.Errorf("temporary file pattern %q holds a path separator", pattern)
	}
	var f *os.File
	var err error
	for range 10000 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10)+suffix)
		f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, File)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		break
	}
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(path); err == nil {
		if err := f.Chmod(st.Mode().Perm()); err != nil {
			f.Close()
			os.Remove(f.Name())
			return nil, fmt.Errorf("give %s the mode of %s: %w", f.Name(), path, err)
		}
	}
	return f, nil
}
