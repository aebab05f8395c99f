package doctor_test

import (
	"testing"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/provision"
)

// On a server whose store is small (max_file_store 256 MiB), a run whose
// answers cannot fit warns with the numbers, one that fits passes, and
// the probes leave no stream behind.
func TestStoreSpace(t *testing.T) {
	t.Parallel()
	srv := brokertest.StartSmall(t, 256<<20)
	_, js := brokertest.Connect(t, srv)
	if err := provision.Streams(t.Context(), js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	queueRun(t, js, "big", 100_000_000, provision.Options{}) // 3 prompts x 500 MB each
	queueRun(t, js, "small", 1000, provision.Options{})
	b := setup(t)
	cfg := b.cfg
	cfg.NATSURL, cfg.PromptsFile, cfg.Backend, cfg.Units = srv.ClientURL(), "", "", ""

	cfg.Run = "big"
	rep := run(t, cfg)
	r := expect(t, rep, "store-space", doctor.Warn,
		"3 answers (not yet done) x 100000000 max_tokens x 5 bytes",
		"the store has about",
		"max_file_store lets a stream reserve",
		"fix:give the server a larger max_file_store")
	t.Log(r.Detail)

	cfg.Run = "small"
	rep = run(t, cfg)
	expect(t, rep, "store-space", doctor.Pass, "the store can still reserve more than that")

	names := js.StreamNames(t.Context())
	for name := range names.Name() {
		if len(name) > 19 && name[:19] == "AERIE_DOCTOR_PROBE_" {
			t.Errorf("probe stream %s left behind", name)
		}
	}
}
