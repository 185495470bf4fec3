// Command image builds cellgate's container image without a container
// engine: it compiles cmd/server, cmd/router and cmd/slotmove as static
// binaries with fixed flags, packs them with the CA bundle and a nonroot
// user into one deterministic layer on an empty base, and writes an OCI
// archive (`podman load -i`, `skopeo copy oci-archive:`). `make image` runs
// it and prints the archive's path on its last line; docs/image.md says
// what is inside.
//
// It lives in its own module so that go-containerregistry stays out of the
// service's dependency graph. It is a one-shot command: no state is shared
// between goroutines.
//
//	go run . [-root ../..] [-o archive] [-ref localhost/cellgate:dev] [-arch amd64] [-ca-bundle file]
//
// Same inputs (sources, Go toolchain, -arch, CA bundle, epoch, -ref,
// -revision) give the same image digest and the same archive bytes.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"
)

// GoBuildFlags are the fixed flags the binaries are built with (the
// Containerfile uses the same): no cgo, no build paths, no build id, no
// VCS stamp, no symbol table, so the same sources and toolchain give the
// same bytes on any machine.
var GoBuildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid="}

func main() {
	root := flag.String("root", "../..", "the cellgate module's root directory")
	out := flag.String("o", "", "archive to write (default <root>/bin/cellgate-image.oci.tar)")
	ref := flag.String("ref", "localhost/cellgate:dev", "the image's name in the archive (podman load tags it so)")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH of the binaries and the image")
	ca := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the PEM CA bundle copied to "+CABundle)
	revision := flag.String("revision", "", "org.opencontainers.image.revision label (e.g. the git commit)")
	flag.Parse()
	if flag.NArg() > 0 {
		fatal(fmt.Errorf("unexpected arguments %q", flag.Args()))
	}
	epoch, err := sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		fatal(err)
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		fatal(err)
	}
	*out = cmp.Or(*out, filepath.Join(absRoot, "bin", "cellgate-image.oci.tar"))
	dst, err := filepath.Abs(*out)
	if err != nil {
		fatal(err)
	}
	caBundle, err := os.ReadFile(*ca)
	if err != nil {
		fatal(fmt.Errorf("-ca-bundle: %w", err))
	}
	binaries, err := buildBinaries(context.Background(), absRoot, *arch)
	if err != nil {
		fatal(err)
	}
	img, err := NewImage(rootFiles(binaries, caBundle), ImageOptions{Epoch: epoch, Arch: *arch, Revision: *revision})
	if err != nil {
		fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		fatal(err)
	}
	if err := WriteArchive(img, *ref, dst, epoch); err != nil {
		fatal(err)
	}
	st, err := os.Stat(dst)
	if err != nil {
		fatal(err)
	}
	fmt.Printf("image %s %s linux/%s, %.1f MiB\n", *ref, digest, *arch, float64(st.Size())/(1<<20))
	fmt.Println(dst) // the last line: scripts and tests read the path from it
}

// sourceDateEpoch reads $SOURCE_DATE_EPOCH (seconds since 1970, the
// reproducible-builds convention); unset means the epoch itself.
func sourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil || s < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", v)
	}
	return time.Unix(s, 0).UTC(), nil
}

// buildBinaries compiles the image's commands under root with
// GoBuildFlags for linux/arch and returns them by name. The environment
// is pinned where it would change the output (cgo, GOFLAGS, the
// per-architecture levels, experiments); the toolchain is root's.
func buildBinaries(ctx context.Context, root, arch string) (map[string][]byte, error) {
	dir, err := os.MkdirTemp("", "cellgate-image-bin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	args := append([]string{"build"}, GoBuildFlags...)
	args = append(args, "-o", dir+string(filepath.Separator))
	for _, b := range Binaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch,
		"GOFLAGS=", "GOAMD64=v1", "GOARM64=v8.0", "GOEXPERIMENT=")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %v: %w", args, err)
	}
	out := map[string][]byte{}
	for _, b := range Binaries {
		if out[b], err = os.ReadFile(filepath.Join(dir, b)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}
