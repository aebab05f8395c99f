package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/hiddenstates"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// extraction is what the run extracts, when it is a hidden-states run:
// the manifest's settings, or those given for a run not produced yet.
func (s *session) extraction() *schema.Extraction {
	if s.manifest != nil {
		return s.manifest.Extraction
	}
	return s.cfg.Extraction
}

// hiddenStatesDir is where the run's hidden-states files go on this
// host: Config.Out, else the manifest's output directory, else the run's
// directory under OutRoot or DataDir; "" when none is known.
func (s *session) hiddenStatesDir() string {
	out := s.cfg.Out
	if x := s.extraction(); out == "" && x != nil && x.Out != "" {
		out = x.Out
	}
	switch {
	case out != "":
	case s.cfg.OutRoot != "" && s.cfg.Run != "":
		out = filepath.Join(s.cfg.OutRoot, s.cfg.Run)
	case s.cfg.DataDir != "":
		out = s.runDir()
	}
	if out == "" {
		return ""
	}
	return filepath.Join(out, schema.HiddenStatesDir)
}

// extractionTokens is the input tokens the rest of the run extracts,
// and where that figure comes from: the manifest (the share not yet
// done, by the run's consumer), or the prompts file.
func (s *session) extractionTokens(ctx context.Context) (int64, string, bool) {
	x := s.extraction()
	if s.manifest != nil && x.Tokens > 0 {
		if s.consumer != nil && s.manifest.Total > 0 {
			left := int64(s.consumer.NumPending) + int64(s.consumer.NumAckPending)
			return x.Tokens * left / int64(s.manifest.Total), fmt.Sprintf("%d of the run's %d samples not yet done", left, s.manifest.Total), true
		}
		return x.Tokens, "every sample in the manifest", true
	}
	if s.cfg.PromptsFile == "" {
		return 0, "", false
	}
	type scanned struct {
		tokens  int64
		samples int
		err     error
	}
	sc, err := await(ctx, func() scanned {
		rd, err := dataset.Open(s.cfg.PromptsFile, dataset.ParseOptions{Task: schema.TaskHiddenStates})
		if err != nil {
			return scanned{err: err}
		}
		defer rd.Close()
		var out scanned
		for {
			rec, err := rd.Next()
			if errors.Is(err, io.EOF) {
				return out
			}
			if err != nil {
				return scanned{err: err}
			}
			if rec.Err == nil {
				out.tokens += int64(len(rec.Line.InputIDs))
				out.samples++
			}
		}
	})
	if err != nil || sc.err != nil {
		return 0, "", false
	}
	return sc.tokens, fmt.Sprintf("%d samples in %s", sc.samples, filepath.Base(s.cfg.PromptsFile)), true
}

// checkHiddenStatesSpace compares what the rest of a hidden-states run
// writes (tokens x layers x hidden x dtype size, and the token ids) with
// the free space where its files go.
func checkHiddenStatesSpace(ctx context.Context, s *session) Result {
	x := s.extraction()
	if x == nil {
		return skip("not a hidden-states run")
	}
	dir := s.hiddenStatesDir()
	if dir == "" {
		return skip("the output directory is not known here (--data-dir, or the run's --out)")
	}
	tokens, from, ok := s.extractionTokens(ctx)
	if !ok {
		return skip("the run's size is unknown (no manifest or prompts file to count)")
	}
	res, bad := measureFree(ctx, dir)
	if bad != nil {
		return *bad
	}
	need := uint64(tokens * x.BytesPerToken())
	how := fmt.Sprintf("%s for %d tokens (%s) x %d layers x %d hidden x %d bytes (%s), and their ids",
		formatBytes(need), tokens, from, len(x.LayerIDs), x.HiddenSize, schema.DTypeSize(x.DType), x.DType)
	free := fmt.Sprintf("%s free at %s", formatBytes(res.free), res.path)
	if need+minFree > res.free {
		return fail("free space there, or produce the run with --out on a larger disk: a full disk pauses every worker",
			"the hidden states need %s; %s", how, free)
	}
	return pass("the hidden states need %s; %s", how, free)
}

// extractionProbe is the prompt the extraction check sends: three token
// ids every vocabulary has.
var extractionProbe = []int64{0, 1, 2}

// mlaModel matches the models whose attention (multi-head latent
// attention) vLLM's extraction is not known to handle.
var mlaModel = regexp.MustCompile(`(?i)deepseek[-_]?(v2|v3|r1)|kimi[-_]?k`)

// mlaWarning names what is known of extraction on MLA models.
const mlaWarning = "no extraction of an MLA model (DeepSeek-V2/V3, Kimi-K2) on vLLM has been confirmed: the last layer id was dropped on DeepSeek-V2-family models until vLLM #46973, mixed MLA models fail with \"MLA verifiers are unsupported\", and Kimi-K3 captures the wrong final layer (vLLM #50815); compare a sample's last layer with a reference before a long run"

// checkExtraction asks the backend for the hidden states of a short
// prompt and, where the server's file is on this host's disk, verifies
// it as a worker does, then removes it.
func checkExtraction(ctx context.Context, s *session) Result {
	x := s.extraction()
	if x == nil {
		return skip("not a hidden-states run")
	}
	if s.cfg.Backend == "" {
		return skip("no backend given (--backend)")
	}
	if !s.passed("backend") {
		return skip("backend not healthy (see backend)")
	}
	model, _, ok := s.runModel()
	if !ok {
		return skip("no model to ask (see model)")
	}
	want := hiddenstates.Want{TokenIDs: extractionProbe, Layers: len(x.LayerIDs), Hidden: x.HiddenSize, DType: x.DType}
	// A server that writes a bad file now and then is one the workers
	// handle (they retry): a bad file fails the check only when every
	// one of probeTries is bad.
	var bad []string
	for range probeTries {
		r, badFile := probeExtraction(ctx, s, model, x, want)
		if !badFile {
			if len(bad) > 0 && r.Status == Pass {
				return warn("check the server's log: the workers retry such files, but each costs a request",
					"%s; but first %d bad file(s): %s", r.Detail, len(bad), strings.Join(bad, "; "))
			}
			return r
		}
		bad = append(bad, r.Detail)
	}
	return fail("check the server's --speculative-config layer ids and the run's --layer-ids, --hidden-size and --dtype",
		"%d extractions of a %d-token prompt gave no good file: %s", probeTries, len(extractionProbe), strings.Join(bad, "; "))
}

// probeTries is how many probes the extraction check sends at most.
const probeTries = 3

// probeExtraction sends one probe and checks its file; badFile is set
// when the server answered and its file is not what the run needs.
func probeExtraction(ctx context.Context, s *session, model string, x *schema.Extraction, want hiddenstates.Want) (r Result, badFile bool) {
	ext, err := s.client.Extract(ctx, model, extractionProbe)
	switch {
	case errors.Is(err, openai.ErrNoExtraction):
		return fail(fmt.Sprintf("start vLLM with --speculative-config '{\"method\": \"extract_hidden_states\", \"num_speculative_tokens\": 1, \"draft_model_config\": {\"hf_config\": {\"eagle_aux_hidden_state_layer_ids\": %s}}}' and --kv-transfer-config '{\"kv_connector\": \"ExampleHiddenStatesConnector\", \"kv_role\": \"kv_producer\", \"kv_connector_extra_config\": {\"shared_storage_path\": \"DIR\"}}'", layerList(x.LayerIDs)),
			"%s answers completions without extracting hidden states", s.cfg.Backend), false
	case err != nil:
		return fail("check the server's log", "an extraction request to %s failed: %v", s.cfg.Backend, err), false
	}
	detail := fmt.Sprintf("extracted a %d-token prompt in %s: the server writes %s", len(extractionProbe), ext.Latency.Round(time.Millisecond), ext.Path)
	if _, err := os.Stat(filepath.Dir(ext.Path)); err != nil {
		r = warn("run each worker on the server's host, or give it the server's storage on a shared disk: a worker publishes only files it can read",
			"%s; that directory is not on this host's disk, so the file was not verified here", detail)
		return r, false
	}
	verified, verr := verifyProbe(ctx, ext.Path, want)
	switch {
	case verr != nil:
		return Result{Detail: fmt.Sprintf("%s, which does not hold what the run needs: %v", detail, verr)}, true
	default:
		r = pass("%s, verified (%d tokens x %d layers x %d hidden, %s, %d bytes) and removed", detail,
			verified.Shape[0], verified.Shape[1], verified.Shape[2], verified.DType, verified.Bytes)
	}
	if mlaModel.MatchString(model) {
		return warn("check the files of a few samples against a reference extraction", "%s; %s", r.Detail, mlaWarning), false
	}
	return r, false
}

// verifyProbe waits for the server's file at path, verifies it against
// want and removes it with its lock.
func verifyProbe(ctx context.Context, path string, want hiddenstates.Want) (hiddenstates.Summary, error) {
	defer func() {
		os.Remove(path)
		os.Remove(hiddenstates.LockName(path))
	}()
	release, err := hiddenstates.WaitWritten(ctx, path, 10*time.Millisecond)
	if err != nil {
		return hiddenstates.Summary{}, err
	}
	defer release()
	return hiddenstates.VerifyFile(path, want)
}

// layerList is ids as a JSON list.
func layerList(ids []int) string {
	b := []byte{'['}
	for i, id := range ids {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%d", id)
	}
	return string(append(b, ']'))
}

// TokenIDCheck is the producer's question to the server of client, of
// an extraction run of model: does it take token id maxID? It asks for
// that one token's hidden states; a refusal (a 400: "out of
// vocabulary") is the answer, and the file the server writes is removed
// when this host can see it.
func TokenIDCheck(client *openai.Client, model string) func(context.Context, int64) error {
	return func(ctx context.Context, maxID int64) error {
		ext, err := client.Extract(ctx, model, []int64{maxID})
		if err != nil {
			var apiErr *openai.APIError
			if errors.As(err, &apiErr) && apiErr.Status == 400 {
				return fmt.Errorf("the server refuses it (%v): the input was tokenized for another model, or --model names another", err)
			}
			return fmt.Errorf("asking the server whether it takes that id: %w", err)
		}
		if release, err := hiddenstates.WaitWritten(ctx, ext.Path, 10*time.Millisecond); err == nil {
			release()
		}
		os.Remove(ext.Path)
		os.Remove(hiddenstates.LockName(ext.Path))
		return nil
	}
}
