package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"
)

// The image's fixed layout: where the binaries, the CA bundle and the user
// live. docs/image.md and the Containerfile describe the same layout;
// TestContainerfileMatchesLayout holds the Containerfile to it.
const (
	BinDir     = "/usr/local/bin"
	CABundle   = "/etc/ssl/certs/ca-certificates.crt"
	HomeDir    = "/home/nonroot"
	UID        = 65532
	GID        = 65532
	UserName   = "nonroot"
	ServerPort = "8080/tcp"
	RouterPort = "8090/tcp"
)

// Binaries are the commands of this module the image carries, by the name
// they get in BinDir.
var Binaries = []string{"server", "router", "slotmove"}

// File is one entry of the image's only layer. Paths are absolute; a
// directory has Dir set and no Data.
type File struct {
	Path string
	Mode int64 // permission bits (and sticky), not the type
	UID  int
	GID  int
	Dir  bool
	Data []byte
}

// rootFiles returns every entry of the layer: the directory tree, the
// user and group files, the CA bundle and the binaries (name → contents).
func rootFiles(binaries map[string][]byte, caBundle []byte) []File {
	files := []File{
		{Path: "/etc", Mode: 0o755, Dir: true},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\n" + fmt.Sprintf("%s:x:%d:\n", UserName, GID))},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			fmt.Sprintf("%s:x:%d:%d:%s:%s:/sbin/nologin\n", UserName, UID, GID, UserName, HomeDir))},
		{Path: "/etc/ssl", Mode: 0o755, Dir: true},
		{Path: "/etc/ssl/certs", Mode: 0o755, Dir: true},
		{Path: CABundle, Mode: 0o644, Data: caBundle},
		{Path: "/home", Mode: 0o755, Dir: true},
		{Path: HomeDir, Mode: 0o700, UID: UID, GID: GID, Dir: true},
		{Path: "/tmp", Mode: 0o1777, Dir: true},
		{Path: "/usr", Mode: 0o755, Dir: true},
		{Path: "/usr/local", Mode: 0o755, Dir: true},
		{Path: BinDir, Mode: 0o755, Dir: true},
	}
	for name, data := range binaries {
		files = append(files, File{Path: path.Join(BinDir, name), Mode: 0o755, Data: data})
	}
	return files
}

// layerTar writes files as an uncompressed tar stream in path order, every
// header with mtime epoch, numeric owners only (no user or group names)
// and no PAX records, so the stream depends on the files alone — not on
// the build machine's clock, users or umask.
func layerTar(files []File, epoch time.Time) ([]byte, error) {
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, f := range sorted {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("image: layer path %q is not clean and absolute", f.Path)
		}
		if i > 0 && sorted[i-1].Path == f.Path {
			return nil, fmt.Errorf("image: layer path %q twice", f.Path)
		}
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(f.Path, "/"),
			Mode:    f.Mode,
			Uid:     f.UID,
			Gid:     f.GID,
			ModTime: epoch,
			Format:  tar.FormatUSTAR,
		}
		if f.Dir {
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		} else {
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("image: %s: %w", f.Path, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("image: %s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// opener returns a tarball.Opener over b.
func opener(b []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}
