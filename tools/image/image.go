package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refNameAnnotation names the image in an OCI layout's index; `podman
// load` tags the loaded image with it.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// ImageOptions are the inputs of an image besides its files.
type ImageOptions struct {
	// Epoch is every timestamp in the image: the layer's mtimes, the
	// config's created time and its history entry.
	Epoch time.Time
	// Arch is the GOARCH of the binaries (the config's architecture).
	Arch string
	// Revision, when set, is the org.opencontainers.image.revision label.
	Revision string
}

// NewImage assembles the image from its one layer of files: an empty base
// (FROM scratch), OCI media types, the nonroot user and the server as
// entrypoint. Nothing in it depends on the build machine but the files.
func NewImage(files []File, o ImageOptions) (v1.Image, error) {
	raw, err := layerTar(files, o.Epoch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(opener(raw), tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: o.Epoch.UTC()}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "cellgate tools/image (make image)", Comment: "server, router, slotmove, CA certificates"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = o.Arch, "linux", created
	labels := map[string]string{
		"org.opencontainers.image.title":       "cellgate",
		"org.opencontainers.image.description": "cellgate cell server, cell router and slot-move tool (docs/image.md)",
	}
	if o.Revision != "" {
		labels["org.opencontainers.image.revision"] = o.Revision
	}
	cf.Config = v1.Config{
		Entrypoint:   []string{path.Join(BinDir, "server")},
		Cmd:          []string{"serve"},
		User:         fmt.Sprintf("%d:%d", UID, GID),
		WorkingDir:   HomeDir,
		Env:          []string{"PATH=" + BinDir, "SSL_CERT_FILE=" + CABundle},
		ExposedPorts: map[string]struct{}{ServerPort: {}, RouterPort: {}},
		Labels:       labels,
		StopSignal:   "SIGTERM",
	}
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img as an OCI image layout in a tar archive at dst
// (what `podman load -i` and `skopeo copy oci-archive:` read), named ref
// in the layout's index. The archive's entries are sorted with fixed
// headers, so equal images give equal archives byte for byte.
func WriteArchive(img v1.Image, ref, dst string, epoch time.Time) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Dir(dst), ".image-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: ref})); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := tarDir(out, dir, epoch); err != nil {
		out.Close()
		os.Remove(tmp)
		return err
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

// tarDir writes the tree under dir to w in lexical order (WalkDir's),
// every entry owned by 0:0 with mode 0644 or 0755 and mtime epoch.
func tarDir(w io.Writer, dir string, epoch time.Time) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: epoch, Format: tar.FormatUSTAR, Typeflag: tar.TypeReg}
		if d.IsDir() {
			hdr.Name, hdr.Mode, hdr.Typeflag = hdr.Name+"/", 0o755, tar.TypeDir
			return tw.WriteHeader(hdr)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		hdr.Size = st.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
