# cellgate — the two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
BIN   := bin/server
PKGS  := ./...
# CI sets CI=true; tests that need PostgreSQL then fail loudly when it is down.
export CELLGATE_TEST_PG ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable

# The tools' pinned versions live in tools/go.mod, apart from the service's.
TOOL  := $(GO) tool -modfile=tools/go.mod
# The image's name in the archive `make image` writes (podman load tags it so).
IMAGE_REF ?= localhost/cellgate:dev

.PHONY: all help arch test-deps new upgrade upgrade-check generate gen-if-needed check drift apiclient vet vet-bench policy tidy staticcheck sqlc-vet fmt-check opa-check conftest build run devdb-stop test test-deploy screenshots bench bench-peers bench-console bench-plans bench-slotmove cells plan fuzz image podman clean

# The policy and schema CLIs, pinned in tools/policy/go.mod (go tool runs
# them from the module cache; nothing is installed by hand).
POLICY_TOOLS := $(GO) -C tools/policy tool
OPA          := $(POLICY_TOOLS) opa
CUE          := $(POLICY_TOOLS) cue
CONFTEST     := $(POLICY_TOOLS) conftest


all: build

## help: the targets and what they do
help:
	@awk '/^## [a-z][a-z-]*: / { t = $$2; sub(/:$$/, "", t); sub(/^## [a-z][a-z-]*: /, ""); printf "  %-14s %s\n", t, $$0; next } \
	     /^## / { sub(/^## /, ""); printf "  %-14s %s\n", "", $$0 }' $(firstword $(MAKEFILE_LIST))

## generate: CUE spec → OPA policy → gen/ (templates + sqlc), then the stamp of its inputs (gen/.inputs.sha256)
generate:
	$(GO) run ./cmd/generate
	@scripts/genstamp.sh write

# gen/ is fresh when gen/.inputs.sha256 matches the generator's inputs
# (sha256sum, nothing compiled); otherwise the generator runs, in view.
gen-if-needed:
	@if scripts/genstamp.sh check 2>/dev/null; then \
	  echo "make: gen/ is up to date with its inputs (gen/.inputs.sha256); the generator is not needed"; \
	else \
	  scripts/genstamp.sh check || true; \
	  echo "make: running the generator (go run ./cmd/generate; its first build takes minutes on a cold cache)"; \
	  $(MAKE) --no-print-directory generate; \
	fi

## check: template-owned files as recorded (upgrade-check; a no-op in the template itself), import rules, drift check of gen/, its input stamp and the generated API client (tests/apiclient), policy tests, go vet + gofmt (service and bench/), go mod tidy, staticcheck, sqlc vet, cue fmt / opa fmt, opa check and opa test, conftest
check: upgrade-check arch drift policy vet vet-bench tidy staticcheck sqlc-vet fmt-check opa-check conftest

drift:
	$(GO) run ./cmd/generate -check
	scripts/genstamp.sh verify
	@cd tests/apiclient && $(GO) tool oapi-codegen -generate types,client -package client ../../gen/openapi-3.0.json | diff -u client/client.go - >/dev/null \
	  || { echo "tests/apiclient/client/client.go is not what oapi-codegen writes from gen/openapi-3.0.json: run make apiclient"; exit 1; }

## apiclient: regenerate tests/apiclient/client (oapi-codegen, pinned in tests/apiclient/go.mod) from gen/openapi-3.0.json
apiclient:
	cd tests/apiclient/client && $(GO) generate ./...

## arch: the import rules of docs/architecture.md against `go list -deps` (builds no binary)
arch:
	$(GO) test -count=1 ./internal/archtest/

policy:
	$(GO) test -count=1 ./policy/

vet:
	$(GO) vet ./...
	cd tools/image && $(GO) vet ./...
	cd tests/browser && $(GO) vet ./...
	cd tests/apiclient && $(GO) vet ./...
	cd deploytest && $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

# go.mod and go.sum of the service and of tools/ are what `go mod tidy` writes.
tidy:
	$(GO) mod tidy -diff
	for m in tools tools/policy tools/image bench deploytest tests/browser tests/apiclient; do (cd $$m && $(GO) mod tidy -diff) || exit 1; done

staticcheck:
	$(TOOL) staticcheck ./...

## sqlc-vet: sqlc's checks and sqlc.yaml's rules over sql/queries
sqlc-vet:
	$(TOOL) sqlc vet

# The bench module (bench/go.mod, River beside our backend) builds in CI;
# running it is `make bench-peers`.
vet-bench:
	cd bench && $(GO) vet ./... && $(GO) build -o /dev/null ./...

## fmt-check: the CUE and Rego files are as `cue fmt` and `opa fmt` write them
fmt-check:
	$(CUE) fmt --check $(CURDIR)/schema/*.cue
	@test -z "$$($(OPA) fmt --list $(CURDIR)/policy)" || { echo "opa fmt needed:"; $(OPA) fmt --list $(CURDIR)/policy; exit 1; }

## opa-check: the policy compiles in strict mode and its tests pass with opa's defaults
opa-check:
	$(OPA) check --strict $(CURDIR)/policy
	$(OPA) test $(CURDIR)/policy

## conftest: the exported config passes conftest with no flags; a denied one fails it
conftest:
	@mkdir -p bin
	$(GO) run ./cmd/server export > bin/config.json
	$(CONFTEST) test --policy $(CURDIR)/policy $(CURDIR)/bin/config.json
	$(GO) run ./cmd/server export -config tests/testdata/corpus/invalid/policy_lanes_over_workers.json > bin/denied.json
	@if $(CONFTEST) test --policy $(CURDIR)/policy $(CURDIR)/bin/denied.json >bin/denied.out 2>&1; then \
		echo "conftest passed a denied config:"; cat bin/denied.out; exit 1; fi
	@grep -q "jobs.tenants.lanes" bin/denied.out && echo "conftest: denied config fails as it must"

## new: a new service from this template: make new MODULE=example.com/acme/billing DIR=../billing
## (its module path everywhere, cellgate.lock with the template commit, one git commit)
new:
	@test -n "$(MODULE)" -a -n "$(DIR)" || { echo "usage: make new MODULE=example.com/acme/billing DIR=../billing"; exit 2; }
	$(GO) run ./cmd/newservice -module $(MODULE) -dir $(DIR)

## upgrade: a newer template into this service: make upgrade FROM=<path or git URL>
## (three-way merge of template-owned files, conflicts listed, cellgate.lock updated, make generate)
upgrade:
	@test -n "$(FROM)" || { echo "usage: make upgrade FROM=<path or git URL of a newer template>"; exit 2; }
	$(GO) run ./cmd/newservice upgrade -from $(FROM)

## upgrade-check: template-owned files are as cellgate.lock records, or listed in its local_changes with a reason
upgrade-check:
	$(GO) run ./cmd/newservice check

## plan: effective-config difference per cell and operator actions since BASE (default: merge base with main); exit 2 when an action is needed
plan:
	$(GO) run ./cmd/plan $(if $(BASE),-base $(BASE))

## build: the cell server
build: gen-if-needed
	@echo "make: building the cell server: go build -o $(BIN) ./cmd/server"
	$(GO) build -o $(BIN) ./cmd/server

## run: a single cell on local PostgreSQL, in databases of this checkout (see scripts/devdb.sh)
# devdb.sh's exports are taken first, so a failing devdb.sh stops here with
# its own message (eval "$$(…)" would succeed on empty output).
run: build
	@echo "make: finding PostgreSQL and creating this checkout's databases (scripts/devdb.sh)"
	@exports=$$(scripts/devdb.sh $(BIN)) || exit $$?; eval "$$exports"; \
	  printf '%s\n' "$$exports" | sed -n "s/^export \([A-Za-z0-9_]*\)='\(.*\)'$$/make: database \1 = \2/p" | sed 's#://\([^:@/]*\):[^@]*@#://\1:***@#'; \
	  echo "make: starting the cell: $(BIN) serve"; \
	  exec $(BIN) serve

## devdb-stop: stop the private PostgreSQL cluster make run may have started in .devdb/
devdb-stop:
	@scripts/devdb.sh --stop

## test: every test, with the race detector, then the deploy output checks
## and the image tool's module; first installs what the tests need (test-deps)
test: test-deps test-deploy
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	cd tests/browser && $(GO) test -count=1 -timeout 5m ./...
	cd tests/apiclient && $(GO) test -count=1 -timeout 5m ./...
	cd tools/image && $(GO) test -race -count=1 -timeout 10m ./...

## screenshots: the console's browser test, writing the screenshots docs/console.md shows
screenshots:
	cd tests/browser && $(GO) test -count=1 -timeout 5m ./... -shots ../../docs/console

## test-deps: chromium, podman + runc, kubectl, promtool, redis-server: installed
## with apt where missing (Debian family), else named with how to get them
test-deps:
	@scripts/test-deps.sh

## test-deploy: gen/deploy through k8s.io/api, kustomize, kubectl, promtool and the PromQL parser (own module)
test-deploy:
	cd deploytest && $(GO) test -count=1 ./...

## image: the OCI image archive of server, router and slotmove (docs/image.md);
## no container engine needed; the last line printed is the archive's path
image: gen-if-needed
	@cd tools/image && $(GO) run . -root $(CURDIR) -o $(CURDIR)/bin/cellgate-image.oci.tar -ref $(IMAGE_REF)

## podman: install podman and runc (Debian) for the container test in tests/
SUDO = $(if $(filter 0,$(shell id -u)),,sudo)
podman:
	@command -v podman >/dev/null && command -v runc >/dev/null || \
	  { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq podman runc; }

## bench: the benchmark tables (ratios against same-run baselines)
bench:
	@mkdir -p bin
	set -o pipefail; $(GO) test -run '^$$' -bench . -cpu=1,2 -benchmem -count=5 ./internal/admission | tee bin/admission.bench | $(GO) run ./cmd/benchtable admission
	$(GO) test -run '^$$' -bench 'LocalThroughput' -benchtime 1000000x -benchmem -count=5 ./internal/jobs/local/
	$(GO) test -run '^$$' -bench 'QuietTenantWait' -benchtime 20x ./internal/jobs/local/
	$(GO) test -run '^$$' -bench . -benchmem -count=3 ./internal/jobs/pgjobs/ ./internal/slots/ ./internal/cells/ ./policy/
	$(GO) test -run '^$$' -bench . -skip 'BenchmarkSlotMove' -benchmem -count=3 ./tests/

## bench-slotmove: the online slot move's figures: a million rows in the moving range, updates and
## deletes during the move, the moving tenants' 503 window through the router (docs/cells.md)
bench-slotmove:
	$(GO) test -run '^$$' -bench 'BenchmarkSlotMove' -benchtime 1x -timeout 60m -v ./tests/

## bench-plans: the tenant plans figures, one `plans: NAME=VALUE` line each (docs/plans.md)
bench-plans:
	GO=$(GO) scripts/bench-plans.sh

## bench-console: the operator console over a million jobs in two shards (docs/console.md, "Performance")
bench-console:
	$(GO) test -run '^$$' -bench 'ConsoleMillion' -benchtime 1x -benchmem -timeout 30m ./internal/console/

## fuzz: FuzzOverlayVerdict for FUZZTIME (default 60s): a per-cell overlay
## never panics the loader, and generate and `server check` agree on it.
## The instrumented CUE/OPA build is compiled first (it takes minutes on a
## busy machine, silently); minimizing a failure is capped at 10s.
FUZZTIME ?= 60s
fuzz:
	@mkdir -p bin
	$(GO) test -c -fuzz=. -o bin/configload.fuzz.test ./internal/configload
	cd internal/configload && ../../bin/configload.fuzz.test -test.run '^$$' -test.fuzz '^FuzzOverlayVerdict$$' \
	  -test.fuzztime $(FUZZTIME) -test.fuzzminimizetime 10s -test.fuzzcachedir ../../bin/fuzzcache

## bench-peers: our PostgreSQL job backend and River side by side (docs/benchmarks.md)
bench-peers:
	cd bench && $(GO) run ./peers $(PEERS_FLAGS)

## cells: a router and two cells on loopback, each cell with its own databases
cells:
	scripts/cells.sh

clean:
	rm -rf bin
