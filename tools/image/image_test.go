package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var epoch0 = time.Unix(0, 0).UTC()

// fakeBinaries stand in for the commands where only the packing is tested.
func fakeBinaries() map[string][]byte {
	m := map[string][]byte{}
	for _, b := range Binaries {
		m[b] = []byte("binary " + b)
	}
	return m
}

func digest(t testing.TB, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestImageDigestDependsOnInputsOnly: the same files and options give the
// same digest however often they are packed (and in whatever order the
// files come); a changed epoch, file or architecture gives another.
func TestImageDigestDependsOnInputsOnly(t *testing.T) {
	opts := ImageOptions{Epoch: epoch0, Arch: "amd64"}
	files := rootFiles(fakeBinaries(), []byte("ca"))
	a, err := NewImage(files, opts)
	if err != nil {
		t.Fatal(err)
	}
	reversed := slices.Clone(files)
	slices.Reverse(reversed)
	b, err := NewImage(reversed, opts)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, a) != digest(t, b) {
		t.Fatalf("same inputs, different digests: %s %s", digest(t, a), digest(t, b))
	}
	for name, change := range map[string]func() ([]File, ImageOptions){
		"epoch": func() ([]File, ImageOptions) { o := opts; o.Epoch = time.Unix(1700000000, 0); return files, o },
		"arch":  func() ([]File, ImageOptions) { o := opts; o.Arch = "arm64"; return files, o },
		"file":  func() ([]File, ImageOptions) { return rootFiles(fakeBinaries(), []byte("other ca")), opts },
	} {
		f, o := change()
		c, err := NewImage(f, o)
		if err != nil {
			t.Fatal(err)
		}
		if digest(t, c) == digest(t, a) {
			t.Errorf("changed %s, same digest %s", name, digest(t, a))
		}
	}
	if _, err := NewImage(append(files, File{Path: "/etc/passwd", Mode: 0o644}), opts); err == nil {
		t.Error("a path twice was accepted")
	}
	if _, err := NewImage([]File{{Path: "etc/x"}}, opts); err == nil {
		t.Error("a relative path was accepted")
	}
}

// TestArchivesAreByteIdentical: writing one image twice gives the same
// archive bytes.
func TestArchivesAreByteIdentical(t *testing.T) {
	img, err := NewImage(rootFiles(fakeBinaries(), []byte("ca")), ImageOptions{Epoch: epoch0, Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var sums [2][32]byte
	for i := range sums {
		p := filepath.Join(dir, string(rune('a'+i)), "img.tar")
		if err := WriteArchive(img, "localhost/x:y", p, epoch0); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = sha256.Sum256(b)
	}
	if sums[0] != sums[1] {
		t.Fatalf("one image, two archives: %x %x", sums[0], sums[1])
	}
}

// TestMakeImageReproducible runs the command as `make image` does, twice
// (into different directories, from a different working directory), and
// holds the result to what docs/image.md promises: one digest and one
// archive for the same inputs; a layer without the build machine's
// timestamps, users or paths; static linux binaries; the nonroot user; no
// shell.
func TestMakeImageReproducible(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tool := filepath.Join(dir, "image-tool")
	if out, err := exec.Command("go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the command: %v\n%s", err, out)
	}
	var archives [2][]byte
	var digests [2]string
	for i := range archives {
		want := filepath.Join(dir, string(rune('a'+i)), "cellgate.oci.tar")
		cmd := exec.Command(tool, "-root", root, "-o", want, "-ref", "localhost/cellgate-test:repro")
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("image command: %v\n%s%s", err, stdout.String(), stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if got := lines[len(lines)-1]; got != want {
			t.Fatalf("last line %q, want the archive path %q", got, want)
		}
		for f := range strings.FieldsSeq(stdout.String()) {
			if strings.HasPrefix(f, "sha256:") {
				digests[i] = f
			}
		}
		if archives[i], err = os.ReadFile(want); err != nil {
			t.Fatal(err)
		}
	}
	if digests[0] == "" || digests[0] != digests[1] {
		t.Fatalf("two builds, digests %q and %q", digests[0], digests[1])
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Fatalf("two builds, archives differ (%x, %x)", sha256.Sum256(archives[0]), sha256.Sum256(archives[1]))
	}
	t.Logf("two builds: %s, archive %.1f MiB", digests[0], float64(len(archives[0]))/(1<<20))

	img := loadArchive(t, archives[0], "localhost/cellgate-test:repro")
	if d := digest(t, img); d.String() != digests[0] {
		t.Errorf("archive holds %s, the command printed %s", d, digests[0])
	}
	checkManifest(t, img)
	checkConfig(t, img)
	checkLayer(t, img, root)
}

// loadArchive reads the OCI archive's layout and returns its one image,
// which must be named ref.
func loadArchive(t *testing.T, archive []byte, ref string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(epoch0) || hdr.Uname != "" || len(hdr.PAXRecords) > 0 {
			t.Errorf("archive entry %s: uid %d gid %d mtime %s uname %q pax %v", hdr.Name, hdr.Uid, hdr.Gid, hdr.ModTime, hdr.Uname, hdr.PAXRecords)
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations[refNameAnnotation] != ref {
		t.Fatalf("index manifests %+v; want one named %s", im.Manifests, ref)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func checkManifest(t *testing.T, img v1.Image) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Errorf("manifest is not one OCI layer on an empty base: %+v", m)
	}
}

func checkConfig(t *testing.T, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Equal(epoch0) {
		t.Errorf("platform %s/%s created %s", cf.OS, cf.Architecture, cf.Created)
	}
	if c.User != "65532:65532" || c.WorkingDir != HomeDir || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/server"}) ||
		!slices.Equal(c.Cmd, []string{"serve"}) || c.StopSignal != "SIGTERM" {
		t.Errorf("config user %q workdir %q entrypoint %q cmd %q stop %q", c.User, c.WorkingDir, c.Entrypoint, c.Cmd, c.StopSignal)
	}
	if !slices.Contains(c.Env, "SSL_CERT_FILE="+CABundle) || len(c.ExposedPorts) != 2 {
		t.Errorf("env %q ports %v", c.Env, c.ExposedPorts)
	}
	for _, h := range cf.History {
		if !h.Created.Equal(epoch0) {
			t.Errorf("history entry created %s", h.Created)
		}
	}
}

// checkLayer reads the one layer: the exact file list, fixed headers, the
// host's CA bundle, static binaries free of build paths.
func checkLayer(t *testing.T, img v1.Image, root string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var names []string
	tr := tar.NewReader(bufio.NewReader(rc))
	buildPaths := []string{root, os.TempDir()}
	for _, env := range []string{"HOME", "GOPATH", "GOMODCACHE", "GOROOT"} {
		if out, err := exec.Command("go", "env", env).Output(); err == nil && len(bytes.TrimSpace(out)) > 1 {
			buildPaths = append(buildPaths, string(bytes.TrimSpace(out)))
		}
	}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		owner := 0
		if hdr.Name == strings.TrimPrefix(HomeDir, "/")+"/" {
			owner = UID
		}
		if hdr.Uid != owner || hdr.Gid != owner || hdr.Uname != "" || hdr.Gname != "" {
			t.Errorf("%s: owner %d:%d (%q:%q), want %d:%d without names", hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname, owner, owner)
		}
		if !hdr.ModTime.Equal(epoch0) || !hdr.AccessTime.IsZero() || !hdr.ChangeTime.IsZero() || len(hdr.PAXRecords) > 0 {
			t.Errorf("%s: mtime %s atime %s ctime %s pax %v; want the epoch only", hdr.Name, hdr.ModTime, hdr.AccessTime, hdr.ChangeTime, hdr.PAXRecords)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		switch name := "/" + hdr.Name; {
		case name == CABundle:
			host, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
			if err != nil || !bytes.Equal(body, host) {
				t.Errorf("%s is not the build machine's CA bundle (%v)", name, err)
			}
		case hdr.Typeflag == tar.TypeReg && path.Dir(name) == BinDir:
			checkStaticBinary(t, name, body, buildPaths)
		}
	}
	want := []string{"etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt",
		"home/", "home/nonroot/", "tmp/", "usr/", "usr/local/", "usr/local/bin/",
		"usr/local/bin/router", "usr/local/bin/server", "usr/local/bin/slotmove"}
	if !slices.Equal(names, want) {
		t.Errorf("layer entries %q\nwant %q (no shell, nothing else)", names, want)
	}
}

func checkStaticBinary(t *testing.T, name string, body []byte, buildPaths []string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(body))
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked (%s)", name, p.Type)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("%s keeps its symbol table (want -s -w)", name)
	}
	for _, p := range buildPaths {
		if bytes.Contains(body, []byte(p+"/")) {
			t.Errorf("%s contains the build machine's path %s (want -trimpath)", name, p)
		}
	}
}

// TestContainerfileMatchesLayout holds the Containerfile to the layout
// and flags of this command, so the two ways to build stay one image.
func TestContainerfileMatchesLayout(t *testing.T) {
	b, err := os.ReadFile("../../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	cf := string(b)
	want := []string{
		"CGO_ENABLED=0", "-trimpath", "-buildvcs=false", "-ldflags='" + strings.TrimPrefix(GoBuildFlags[2], "-ldflags=") + "'",
		"-o /rootfs" + BinDir + "/ ./cmd/server ./cmd/router ./cmd/slotmove",
		"cp " + CABundle + " /rootfs/etc/ssl/certs/",
		"FROM scratch",
		"COPY --from=build --chown=65532:65532 /rootfs" + path.Dir(HomeDir) + "/ " + path.Dir(HomeDir) + "/",
		"USER 65532:65532",
		"WORKDIR " + HomeDir,
		"ENV PATH=" + BinDir + " SSL_CERT_FILE=" + CABundle,
		"EXPOSE " + ServerPort + " " + RouterPort,
		"STOPSIGNAL SIGTERM",
		`ENTRYPOINT ["` + BinDir + `/server"]`,
		`CMD ["serve"]`,
	}
	for _, w := range want {
		if !strings.Contains(cf, w) {
			t.Errorf("Containerfile lacks %q", w)
		}
	}
	for _, f := range rootFiles(nil, nil) {
		if f.Path == "/etc/passwd" || f.Path == "/etc/group" {
			if w := "printf '" + strings.ReplaceAll(string(f.Data), "\n", `\n`) + "' >/rootfs" + f.Path; !strings.Contains(cf, w) {
				t.Errorf("Containerfile lacks %s", w)
			}
		}
	}
	if len(GoBuildFlags) != 3 {
		t.Errorf("GoBuildFlags %q changed: update the Containerfile and this test", GoBuildFlags)
	}
	if n := strings.Count(cf, "\nFROM "); n != 2 {
		t.Errorf("Containerfile has %d stages, want build and final", n)
	}
}

// TestServiceModuleDoesNotNeedContainerregistry: go-containerregistry is
// this module's dependency, never the service's.
func TestServiceModuleDoesNotNeedContainerregistry(t *testing.T) {
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m all in the service module: %v", err)
	}
	if !bytes.Contains(out, []byte("github.com/labstack/echo/v4")) {
		t.Fatalf("not the service module's list:\n%s", out)
	}
	if bytes.Contains(out, []byte("github.com/google/go-containerregistry")) {
		t.Fatal("the service module's graph contains github.com/google/go-containerregistry")
	}
}
