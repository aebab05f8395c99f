# aerie: see README.md. `make run` rehearses a 25,000-prompt run on this
# machine; `make test` is what CI runs.

GO       ?= go
BIN      := bin/aerie
PREFIX   ?= /usr/local
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/aerie-dev/aerie/schema.buildVersion=$(VERSION)

# make run knobs: RUN names the run (a new name starts a new run; the same
# name resumes), PROMPTS how many synthetic prompts, SPEED the simulator's
# time scale (200: a five-hour run in about a minute and a half). TURNS=all
# rehearses --turns all: conversations of 1 to 3 user turns, from their own
# prompts file, every assistant turn regenerated, under the run name
# demo-25k-turns unless RUN is given; the default, last, answers each
# prompt as given.
TURNS    ?= last
ifeq ($(TURNS),last)
RUN      ?= demo-25k
else
RUN      ?= demo-25k-turns
endif
PROMPTS  ?= 25000
SPEED    ?= 200
DATA     ?= ./data

# FUZZTIME bounds each fuzz target in `make fuzz`: a duration, or a count
# of inputs such as 30000x (what CI uses; see .ci/run).
FUZZTIME ?= 30s

.PHONY: build run test vet bench rss fuzz install clean image deploy-check deploy-schemas natscli browser zsh eta-study

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/aerie

$(DATA)/prompts-$(PROMPTS).jsonl: | build
	$(BIN) gen-prompts --count $(PROMPTS) --out $@

$(DATA)/prompts-$(PROMPTS)-turns3.jsonl: | build
	$(BIN) gen-prompts --count $(PROMPTS) --turns 3 --out $@

ifeq ($(TURNS),last)
RUN_PROMPTS := $(DATA)/prompts-$(PROMPTS).jsonl
RUN_TURNS   :=
else
RUN_PROMPTS := $(DATA)/prompts-$(PROMPTS)-turns3.jsonl
RUN_TURNS   := --turns $(TURNS)
endif

# TOKEN_IDS=1 asks for token ids (--return-token-ids), which the
# speculators export is made of, under the run name <RUN>-ids.
ifeq ($(TOKEN_IDS),1)
RUN_IDS  := --return-token-ids
RUN_NAME := $(RUN)-ids
else
RUN_IDS  :=
RUN_NAME := $(RUN)
endif

run: build $(RUN_PROMPTS)
	$(BIN) run --run $(RUN_NAME) --prompts $(RUN_PROMPTS) --data-dir $(DATA) --sim-speed $(SPEED)$(if $(RUN_TURNS), $(RUN_TURNS))$(if $(RUN_IDS), $(RUN_IDS))
	@echo
	@echo "Export for a trainer (these are simulated answers, hence --allow-simulated):"
	@echo "  SpecForge:   $(BIN) export --run $(RUN_NAME) --data-dir $(DATA) --format specforge --allow-simulated --out $(DATA)/$(RUN_NAME)-specforge.jsonl"
	@echo "  speculators: $(BIN) export --run $(RUN_NAME) --data-dir $(DATA) --format speculators --allow-simulated --out $(DATA)/$(RUN_NAME)-speculators.jsonl$(if $(RUN_IDS),, (needs token ids: make run TOKEN_IDS=1))"

# staticcheck is pinned in go.mod (tool directive), so every machine runs
# the same version.
vet:
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	@test -z "$$(gofmt -l .)" || (echo "gofmt needed:"; gofmt -l .; exit 1)

test: vet deploy-check natscli browser zsh
	mkdir -p artifacts
	AERIE_TEST_ARTIFACTS=$(CURDIR)/artifacts $(GO) test -race -count=1 -timeout 15m ./...

# The live page's test (livepage/) drives a headless Chromium. As root with
# apt-get, install Debian's chromium when no browser is found; otherwise,
# or when that fails, the test says why it skips. Never fails the build.
BROWSERS := chromium chromium-browser google-chrome google-chrome-stable

browser:
	@for b in $(BROWSERS); do command -v $$b >/dev/null 2>&1 && exit 0; done; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium for the live page's test"; \
		(apt-get install -y chromium >/dev/null 2>&1 || \
		 (apt-get update >/dev/null 2>&1 && apt-get install -y chromium >/dev/null 2>&1)) || \
		echo "could not install chromium: the live page's browser test will skip"; \
	else \
		echo "no chromium and no way to install it: the live page's browser test will skip"; \
	fi; true

# The completion test (cmd/aerie) tries the zsh script in zsh. As root
# with apt-get, install Debian's zsh when it is missing; otherwise the
# test tries bash alone and says so. Never fails the build.
zsh:
	@command -v zsh >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing zsh for the completion test"; \
		(apt-get install -y zsh >/dev/null 2>&1 || \
		 (apt-get update >/dev/null 2>&1 && apt-get install -y zsh >/dev/null 2>&1)) || \
		echo "could not install zsh: the completion test tries bash alone"; \
	fi; true

# The nats CLI that cmd/aerie's test runs the README's inspection commands
# with, in bin/tools. Without the module proxy it is not installed and
# that test skips; make test goes on.
NATSCLI_VERSION ?= v0.5.0

natscli:
	@test -x bin/tools/nats || GOBIN=$(CURDIR)/bin/tools $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION) \
		|| echo "natscli $(NATSCLI_VERSION) not installed: the README's nats CLI commands go untested"

# Each fuzz target in turn, bounded by FUZZTIME; the seed corpora are in
# the tests (f.Add). Minimizing a new input is capped at 5s so that the
# time goes to fuzzing.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./schema/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeAny$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./inspect/
	$(GO) test -run '^$$' -fuzz '^FuzzParseLine$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./dataset/
	$(GO) test -run '^$$' -fuzz '^FuzzUnquote$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./dataset/
	$(GO) test -run '^$$' -fuzz '^FuzzExportLine$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./export/
	$(GO) test -run '^$$' -fuzz '^FuzzChunkDecoder$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./openai/
	$(GO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./dataset/lineindex/

# The ETA study (docs/eta.md): the simulator's engine in simulated time,
# at the reference run's shape and full size (25,000 prompts, 200 at a
# time), over ETA_SEEDS seeds; prints the ETA's error and its band's
# coverage at 1% to 50% of each run. Then the heavy-tail study: 6,000
# prompts of mean length 300 at σ 0.6 to 1.5, with and without a
# max_tokens cap, on the engine and on a backend of constant per-request
# speed. `make test` runs a bounded version of each.
ETA_SEEDS   ?= 20
ETA_PROMPTS ?= 25000

eta-study:
	AERIE_ETA_STUDY=1 AERIE_ETA_SEEDS=$(ETA_SEEDS) AERIE_ETA_PROMPTS=$(ETA_PROMPTS) $(GO) test -count=1 -v -timeout 60m -run '^(TestETAStudy|TestETAHeavyTails)$$' ./throughput/
	AERIE_ETA_STUDY=1 $(GO) test -count=1 -v -timeout 30m -run '^TestExtractionETA$$' ./pipeline/

# The pipeline benchmarks print, from one run, aerie's zero-latency
# prompts/s against a plain client's on the same server (aerie/plain) and
# its steady-state throughput against the simulator's (fraction), each
# the median of BENCHN side-by-side iterations (docs/performance.md);
# then, once, the lower bound over the makespan of 4,000 prompts on two
# simulated servers of different size and speed, one worker each, with
# a fixed window of 200 and with --window auto (a few minutes); on the
# same servers, two runs served together against an ideal dispatcher and
# one after the other (BenchmarkBackToBack), two runs of weights 3:1
# (BenchmarkWeights) and a high-priority run produced into a full fleet
# (BenchmarkPriority); and a batch run beside an interactive probe, with
# and without --yield-to-serving (BenchmarkServing); then 4,000 short
# answers (mean 100 tokens) on the same servers in input order and
# longest first by noisy hints, each with --hedge off and auto, and by
# exact length hints (BenchmarkLongestFirst, at real speed: faster, a
# 2-core machine cannot keep up with their answers); and the prompt
# tokens prefilled for 4 samples a prompt, in one request and as separate
# ones, against one sample (BenchmarkSamplesPrefill); and, BENCHN times,
# the CPU per prompt of every process of a zero-latency run, each role in
# its own, against a plain client's in the same run (BenchmarkCPUPerPrompt;
# AERIE_CPU_PROMPTS sets its size, 10,000 by default, AERIE_CPU_WINDOW the
# worker's window, 200, and AERIE_CPU_ANSWER_TOKENS the answers' median
# length, 50; it prints both runs' prompts/s).
BENCHN   ?= 3
# BENCH_EXPORT_DIR is a run's output directory whose completions.jsonl the
# export benchmark reads: by default that of `make run TURNS=all` (about
# 700 MB), made first when it is missing.
BENCH_EXPORT_DIR ?= $(DATA)/demo-25k-turns

bench: $(BENCH_EXPORT_DIR)/completions.jsonl natscli
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHN)x -timeout 30m ./pipeline/
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 10m ./producer/
	$(GO) test -run '^$$' -bench '^(BenchmarkTwoBackendsMakespan|BenchmarkBackToBack|BenchmarkWeights|BenchmarkPriority|BenchmarkServing)$$' -benchtime 1x -timeout 60m ./worker/
	AERIE_MAKESPAN_SPEED=1 $(GO) test -run '^$$' -bench '^BenchmarkLongestFirst$$' -benchtime $(BENCHN)x -timeout 60m ./worker/
	$(GO) test -run '^$$' -bench '^BenchmarkSamplesPrefill$$' -benchtime $(BENCHN)x -timeout 10m ./worker/
	$(GO) test -run '^$$' -bench '^BenchmarkCPUPerPrompt$$' -benchtime $(BENCHN)x -timeout 30m ./cmd/aerie/
	$(GO) test -run '^$$' -bench '^BenchmarkBrokerFloor$$' -benchtime $(BENCHN)x -timeout 30m ./cmd/aerie/
	$(GO) test -run '^$$' -bench '^BenchmarkMillion$$' -benchtime 1x -timeout 60m ./aggregator/
	$(GO) test -run '^$$' -bench '^(BenchmarkVerify|BenchmarkPublish|BenchmarkPublishBySize)$$' -benchtime 5x -timeout 10m ./hiddenstates/
	AERIE_RSS_PRODUCE=1000000 $(GO) test -count=1 -v -run '^TestProducePeakRSS$$' -timeout 30m ./cmd/aerie/
	AERIE_BENCH_EXPORT_DIR=$(BENCH_EXPORT_DIR) $(GO) test -run '^$$' -bench '^BenchmarkExport$$' -benchtime $(BENCHN)x -timeout 20m ./export/

$(DATA)/demo-25k-turns/completions.jsonl:
	$(MAKE) run TURNS=all RUN=demo-25k-turns PROMPTS=25000 DATA=$(DATA)

# Peak RSS (VmHWM) of one worker (window 200), the aggregator and
# the producer, each its own process, through whole runs of RSS_PROMPTS
# prompts (comma-separated sizes) against the simulator at a speed that
# makes it almost free, then of the aggregator restarted on each finished
# run; prints a line per size. A million prompts takes about an hour on
# two shared cores. RSS_BIN measures another build; RSS_RESTART_BINS
# (absolute paths, comma-separated) restarts other builds' aggregators
# on the same files, to compare.
RSS_PROMPTS ?= 25000,1000000

rss:
	AERIE_RSS_PROMPTS=$(RSS_PROMPTS) AERIE_RSS_BIN=$(abspath $(RSS_BIN)) AERIE_RSS_RESTART_BINS=$(RSS_RESTART_BINS) \
		$(GO) test -count=1 -v -timeout 3h -run '^TestPeakRSS$$' ./cmd/aerie/

install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/aerie

clean:
	rm -rf bin

# The chaos suite (internal/chaos/): aerie as separate processes against the
# simulator with injected faults, while workers, the aggregator and the
# NATS server are killed; then every prompt must be in exactly one of
# completions.jsonl and failed.jsonl, once. Each level has a single-turn
# run and a run of conversations under --turns all (workers killed in
# the middle of conversations), whose lines are also checked turn by
# turn, with no stored turn generated again nor left behind, and a run of
# two runs served by the same workers (--runs) whose priority and weight
# change while both run, each run checked the same way, and a
# hidden-states run (--task hidden-states, 5% of the server's files bad)
# whose output is read as its trainer will. chaos-short
# (about 600 prompts, 150 conversations, 600 + 300 prompts side by side
# and 400 samples, a minute or two) is the CI run; chaos (about 5,000
# prompts, 2,500 conversations, 5,000 + 2,500 prompts and 2,000 samples)
# takes about ten minutes. Both also run a three-node cluster of aerie
# server processes (each node, worker and the aggregator in a network
# namespace of its own when run as root) through a leader kill, a worker
# cut off past AckWait and a node rebuilt from an empty store: 900
# prompts in chaos-short, 3,000 in chaos (docs/cluster.md). AERIE_CHAOS_*
# variables tune a run (see internal/chaos/chaos_test.go); a failed run keeps its
# work directory.
.PHONY: chaos chaos-short

chaos:
	AERIE_CHAOS=1 $(GO) test -count=1 -v -timeout 45m -run '^(TestChaos(Turns|Shared|Samples|HiddenStates)?|TestCluster)$$' ./internal/chaos/

chaos-short:
	$(GO) test -count=1 -v -short -timeout 8m -run '^(TestChaosShort(Turns|Shared|Samples|HiddenStates)?|TestClusterShort)$$' ./internal/chaos/

# Every engine's dialect of the simulator (docs/engines.md) at 3,000
# prompts per cell: exactly once under 10% of 429, 503 and in-band
# errors, with a fixed window and with --window auto. make test runs the
# same cells at 150 prompts.
ENGINE_PROMPTS ?= 3000
.PHONY: engines

engines:
	AERIE_ENGINE_PROMPTS=$(ENGINE_PROMPTS) $(GO) test -count=1 -v -timeout 30m -run '^TestExactlyOnceOnEveryEngine$$' ./pipeline/

# deploy/slurm's job scripts against a real Slurm on this machine
# (internal/slurm): Debian's slurmctld, slurmd and munge, started as
# root by the test and stopped by PID; a 3,000-prompt run through sbatch
# with a worker job cancelled mid-run and submitted again. As root with
# apt-get it installs slurm-wlm and munge when they are missing; without
# root or the packages the test says why it skips. About a minute.
# CI runs it at 1,000 prompts to keep within its time.
SLURM_PROMPTS ?= 3000
.PHONY: slurm

slurm:
	@if [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/munged ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing slurm-wlm and munge for the Slurm test"; \
			(apt-get install -y slurm-wlm munge >/dev/null 2>&1 || \
			 (apt-get update >/dev/null 2>&1 && apt-get install -y slurm-wlm munge >/dev/null 2>&1)) || \
			echo "could not install slurm-wlm and munge: the Slurm test will skip"; \
		fi; \
	fi
	AERIE_SLURM=1 AERIE_SLURM_PROMPTS=$(SLURM_PROMPTS) $(GO) test -count=1 -v -timeout 10m ./internal/slurm/

# deploy/README.md, the systemd way, rehearsed (internal/systemd): six
# hosts booted with systemd by systemd-nspawn, each on an overlay of this
# machine's root in a network namespace of its own (three NATS nodes, two
# GPU hosts with the simulator in vLLM's place, the data host), the
# README's command blocks run on them as written, and a run of
# SYSTEMD_PROMPTS prompts through the units, one worker restarted
# mid-run, every prompt written once. As root with apt-get it installs
# systemd-container when it is missing; nats-server and the nats CLI go
# to bin/tools. About a minute.
SYSTEMD_PROMPTS ?= 1000
NATS_SERVER_VERSION ?= v2.15.2
.PHONY: systemd

systemd: build natscli
	@test -x bin/tools/nats-server || GOBIN=$(CURDIR)/bin/tools $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)
	@if [ ! -x /usr/bin/systemd-nspawn ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing systemd-container for the systemd rehearsal"; \
			(apt-get install -y systemd-container >/dev/null 2>&1 || \
			 (apt-get update >/dev/null 2>&1 && apt-get install -y systemd-container >/dev/null 2>&1)) || \
			echo "could not install systemd-container: the systemd rehearsal will skip"; \
		fi; \
	fi
	AERIE_SYSTEMD=1 AERIE_SYSTEMD_PROMPTS=$(SYSTEMD_PROMPTS) $(GO) test -count=1 -v -timeout 10m ./internal/systemd/

# The upgrade tests (internal/upgrade/): real binaries of three builds,
# the release before feature checks (built from a git worktree of its
# commit), today's, and today's with a test-only feature, on runs that
# mix them: the release beside today's workers on a --samples 3 run of
# 1,000 prompts, the older of two builds beside the newer on a run that
# needs the newer's feature, and a rolling upgrade of the aggregator and
# three workers, each killed with SIGKILL, during a run of 3,000 prompts.
# make test runs them too (about a minute once the builds are cached).
.PHONY: upgrade

upgrade:
	$(GO) test -count=1 -v -timeout 20m ./internal/upgrade/

# The container image (Dockerfile): the static binary on
# distroless/static, run as a non-root user. IMAGE names the tag.
IMAGE    ?= aerie:$(VERSION)

image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

# Offline checks of the deployment files: the Dockerfile (BuildKit's
# parser and lint rules) and the static binary it builds, the compose demo
# (compose-go, with the Compose schema), and the Kubernetes manifests
# (rendered by kustomize, validated by kubeconform against the committed
# schemas in deploy/kubernetes/schemas). deploy/check is a module of its
# own, so that these tools stay out of aerie's go.mod.
deploy-check:
	cd deploy/check && $(GO) vet ./... && $(GO) test -count=1 ./...

# Regenerate deploy/kubernetes/schemas from the Kubernetes OpenAPI spec
# and KEDA's CRDs of these versions (needs the Go module proxy).
K8S_SCHEMA_VERSION  ?= v1.37.2
KEDA_SCHEMA_VERSION ?= v2.21.0

deploy-schemas:
	cd deploy/check && $(GO) run ./genschemas -kubernetes $(K8S_SCHEMA_VERSION) -keda $(KEDA_SCHEMA_VERSION) -out ../kubernetes/schemas
