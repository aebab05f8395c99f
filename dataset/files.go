package dataset

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/schema"
)

// WriteFileAtomic writes path through write: into a temporary file in
// path's directory, fsynced and renamed over path only when write
// returns nil. An export that fails or is interrupted leaves no file, or
// the one that was there, never half of one.
func WriteFileAtomic(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := fsmode.CreateTemp(path, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("create a file in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ReadManifest reads a run's manifest.json from its output directory; a
// missing one is nil with no error.
func ReadManifest(dir string) (*schema.Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return schema.DecodeManifest(b)
}
