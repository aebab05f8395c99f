package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aerie-dev/aerie/hiddenstates"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/window"
)

// A sample of a hidden-states run (schema.TaskHiddenStates) is sent as
// speculators' client sends it (openai.Client.Extract: its token ids to
// /v1/completions, max_tokens 1, return_token_ids). The server answers
// with the path its hidden-states connector writes, and writes the file
// after the reply, holding an exclusive lock on path.lock meanwhile. The
// worker, which shares the server's disk, waits for that lock, verifies
// the file as a stream (hiddenstates.Verify) and publishes it under its
// final name, <out>/hidden_states/hs_<idx>.safetensors, before it stores
// the result that names it; only then is the sample acknowledged. A file
// that is absent, cut, of another prompt or not finite is the server's
// fault: it is removed, never published, and the attempt counts as a
// server failure (retried, elsewhere or later; a run of them opens the
// breaker). A sample whose file an earlier attempt published (a worker
// killed before it stored its result) is not asked again: the file is
// verified and its result stored.

// extractor is implemented by backends that extract hidden states
// (*openai.Client does).
type extractor interface {
	Extract(ctx context.Context, model string, ids []int64) (*openai.Extraction, error)
}

// DefaultLockWait is how long a worker waits, after the server's reply,
// for the server to finish writing a sample's file (to release its
// lock): far longer than a gigabyte takes to write, so that only a
// server that never finishes is taken as failed.
const DefaultLockWait = 2 * time.Minute

// lockPoll is how often the file's lock is tried while its writer holds
// it.
const lockPoll = 5 * time.Millisecond

// extractWork is what the executor needs for extraction, besides what it
// has for generation.
type extractWork struct {
	// dataDir is where a run's output goes when its manifest names no
	// directory: <dataDir>/<run>; out, when set, is the output directory
	// of the worker's one run, whatever the manifest names.
	dataDir  string
	out      string
	lockWait time.Duration
	disk     *diskRoom
	// serverDir is the directory the server writes its files to, learnt
	// from its replies (nil until one came): the orphan sweep's.
	serverDir atomic.Pointer[string]
}

// outDir is the output directory of l's run on this worker.
func (x *extractWork) outDir(l *lane) string {
	if x.out != "" {
		return x.out
	}
	if m := l.manifest.Extraction; m != nil && m.Out != "" {
		return m.Out
	}
	return filepath.Join(x.dataDir, l.run)
}

// extract handles one delivered sample of a hidden-states run, from
// decode to acknowledgement (see process).
func (e *executor) extract(ctx context.Context, d *delivery, p *schema.Prompt, l *window.Lease, generated func()) {
	ln := d.lane
	j := newJob(ln, p)
	release := func() {
		l.Release()
		generated()
	}
	if d.attempt > 1 {
		settled, err := e.settler.settledBefore(ctx, d, j)
		if err != nil || settled {
			release()
			if err != nil {
				e.settler.settle(ctx, d, j, err)
			}
			return
		}
	}
	res, err := e.extractSample(ctx, d, j)
	release()
	j.extracted = res
	e.settler.settle(ctx, d, j, err)
}

// extractSample gets j's file published and returns its result.
func (e *executor) extractSample(ctx context.Context, d *delivery, j *job) (*schema.Result, error) {
	ln, p := d.lane, j.p
	x := ln.manifest.Extraction
	idx, err := schema.SampleIndex(p.ID)
	if err == nil && len(p.InputIDs) == 0 {
		err = errors.New("the sample has no input_ids")
	}
	if err == nil && x == nil {
		err = errors.New("the run's manifest has no extraction settings")
	}
	if err != nil {
		return nil, &policy.PoisonError{Err: err}
	}
	dir := filepath.Join(e.extraction.outDir(ln), schema.HiddenStatesDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, &policy.StoreError{Err: fmt.Errorf("make the run's output directory: %w", err)}
	}
	dst := filepath.Join(dir, hiddenstates.Name(idx))
	want := hiddenstates.Want{TokenIDs: p.InputIDs, Layers: len(x.LayerIDs), Hidden: x.HiddenSize, DType: x.DType}
	switch s, err := hiddenstates.VerifyFile(dst, want); {
	case err == nil:
		ln.log.Info("the sample's file was published by an earlier attempt: storing its result", "id", p.ID, "file", dst)
		return e.extractedResult(d, j, idx, s, 0, ""), nil
	case !errors.Is(err, os.ErrNotExist):
		ln.log.Warn("removing a damaged file where the sample's goes; extracting it again", "file", dst, "err", err)
		if rerr := os.Remove(dst); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return nil, &policy.StoreError{Err: rerr}
		}
	}
	need := int64(len(p.InputIDs)) * x.BytesPerToken()
	if err := e.extraction.disk.wait(ctx, ln, e.roomDirs(dir), need); err != nil {
		return nil, err
	}
	ext, err := e.requests.extract(ctx, ln, p.InputIDs)
	if err != nil {
		return nil, err
	}
	dirOf := filepath.Dir(ext.Path)
	e.extraction.serverDir.Store(&dirOf)
	s, err := e.publish(ctx, ext.Path, dst, want)
	failure := policy.Classify(err)
	if err != nil && ctx.Err() == nil {
		e.requests.health.record(failure)
		e.requests.metrics.request(ln.run, nil, failure)
	} else if err == nil {
		e.requests.health.record(nil)
		e.requests.metrics.request(ln.run, &openai.Completion{TTFT: ext.Latency, Latency: ext.Latency}, nil)
	}
	if err != nil {
		return nil, failure
	}
	if s.Existed {
		ln.log.Info("another attempt published the sample's file first: its result names that file", "id", p.ID, "file", dst)
	}
	ln.n.tokens.Add(int64(len(p.InputIDs)))
	return e.extractedResult(d, j, idx, s.Summary, ext.Latency, ext.Fingerprint), nil
}

// roomDirs are the directories a sample's file takes room in: the run's
// output directory and, once known, the server's.
func (e *executor) roomDirs(out string) []string {
	dirs := []string{out}
	if s := e.extraction.serverDir.Load(); s != nil && *s != out {
		dirs = append(dirs, *s)
	}
	return dirs
}

// publish waits until the server has written its file at path, verifies
// it and publishes it at dst. The server's file and its lock are gone
// when it returns, whatever happened: a file never published is an
// abandoned attempt's.
func (e *executor) publish(ctx context.Context, path, dst string, want hiddenstates.Want) (hiddenstates.Published, error) {
	defer removeServerFile(path)
	wctx, cancel := context.WithTimeoutCause(ctx, e.extraction.lockWait,
		fmt.Errorf("still locked by its writer %v after the reply", e.extraction.lockWait))
	defer cancel()
	unlock, err := hiddenstates.WaitWritten(wctx, path, lockPoll)
	if err != nil {
		if ctx.Err() != nil {
			return hiddenstates.Published{}, ctx.Err()
		}
		return hiddenstates.Published{}, &policy.BadFileError{Path: path, Err: err}
	}
	defer unlock()
	pub, err := hiddenstates.Publish(path, dst, want)
	var bad *hiddenstates.Error
	switch {
	case err == nil:
		return pub, nil
	case errors.As(err, &bad):
		return pub, &policy.BadFileError{Path: path, Err: err}
	case errors.Is(err, os.ErrNotExist):
		return pub, &policy.BadFileError{Path: path, Err: errors.New("not there: the server answered without writing it")}
	case errors.Is(err, syscall.ENOSPC):
		return pub, &policy.StoreError{Err: fmt.Errorf("no room to publish %s: %w", dst, err)}
	}
	return pub, &policy.StoreError{Err: err}
}

// removeServerFile removes a server's file and its lock, if still there.
func removeServerFile(path string) {
	os.Remove(path)
	os.Remove(hiddenstates.LockName(path))
}

// extractedResult is the result of j, whose file at idx is s, on
// delivery d.
func (e *executor) extractedResult(d *delivery, j *job, idx int, s hiddenstates.Summary, latency time.Duration, fingerprint string) *schema.Result {
	ln := d.lane
	return &schema.Result{
		Run: ln.run, ID: j.p.ID, Model: ln.manifest.Model, Worker: e.name, Attempts: d.attempt,
		PromptTokens: len(j.p.InputIDs), LatencyMs: latency.Milliseconds(), TTFTMillis: latency.Milliseconds(),
		FinishedAt: time.Now().UTC(), Simulated: fingerprint == schema.SimulatedFingerprint,
		HiddenStates: &schema.HiddenStatesFile{
			Index: idx, File: filepath.ToSlash(filepath.Join(schema.HiddenStatesDir, hiddenstates.Name(idx))),
			Bytes: s.Bytes, SHA256: s.SHA256, Shape: s.Shape[:], DType: s.DType,
		},
		InputIDs: j.p.InputIDs, LossMask: j.p.LossMask,
	}
}

// extract asks the backend for the hidden states of ids, for l's run.
// The request's failure is classified and counted here; its success is
// recorded by the caller once the file is verified, since a 200 does not
// prove the file.
func (q *requester) extract(ctx context.Context, l *lane, ids []int64) (*openai.Extraction, error) {
	x, ok := q.backend.(extractor)
	if !ok {
		return nil, &policy.PoisonError{Err: errors.New("this worker's backend cannot extract hidden states")}
	}
	q.started()
	defer q.generating.Add(-1)
	ext, err := x.Extract(ctx, l.manifest.Model, ids)
	if err == nil {
		return ext, nil
	}
	failure := policy.Classify(err)
	if ctx.Err() == nil {
		q.health.record(failure)
		q.metrics.request(l.run, nil, failure)
	}
	return nil, failure
}
