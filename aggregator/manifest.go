package aggregator

import (
	"io"
	"path/filepath"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// writeManifest writes the run's manifest to dir/manifest.json, whole or
// not at all, so that the output files say what produced them without
// NATS: the model, the sampling parameters, the prompt count. The
// manifest holds no credentials (backend keys belong to the workers).
func writeManifest(dir string, m *schema.Manifest) error {
	b, err := schema.EncodeManifest(m)
	if err != nil {
		return err
	}
	return dataset.WriteFileAtomic(filepath.Join(dir, ManifestFile), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}
