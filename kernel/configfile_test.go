package kernel_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
)

// TestConfigFileBounded: New refuses a config file that is not a regular
// file (a character device that never ends, a named pipe that would block
// the open, a socket, a directory) and one larger than
// MaxConfigFileBytes (a 1 GiB sparse file), with an *fs.PathError
// naming the path and saying why, without reading it.
func TestConfigFileBounded(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	justOver := filepath.Join(dir, "over.json")
	doc := `{"Sundial":{}}` + strings.Repeat(" ", kernel.MaxConfigFileBytes)
	if err := os.WriteFile(justOver, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct{ name, path, want string }{
		{"dev zero", "/dev/zero", "not a regular file but a character device"},
		{"dev urandom", "/dev/urandom", "not a regular file but a character device"},
		{"named pipe", fifo, "not a regular file but a named pipe"},
		{"socket", sock, "not a regular file but a socket"},
		{"directory", dir, "not a regular file but a directory"},
		{"1 GiB", huge, "larger than 4194304 bytes"},
		{"one byte over", justOver, "larger than 4194304 bytes"},
		{"missing", filepath.Join(dir, "missing.json"), "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := kernel.New(kernel.WithConfigFile(tc.path))
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute): // far beyond any schedule: a read without end
				t.Fatalf("New(WithConfigFile(%s)) has not returned after a minute", tc.path)
			}
			var fe *fs.PathError
			if !errors.As(err, &fe) || fe.Path != tc.path || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(WithConfigFile(%s)) = %v, want an *fs.PathError for the path saying %q", tc.path, err, tc.want)
			}
			if want := "kernel: config file " + tc.path + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q does not start with %q", err, want)
			}
		})
	}
}

// TestReloadRefusesAConfigFileGrownPastTheBound: a watched config file
// replaced by one past MaxConfigFileBytes, or by a device, is refused by
// the reload like an invalid document: the limits in force stay.
func TestReloadRefusesAConfigFileGrownPastTheBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	writeAtomically(t, path, limitDoc(2))
	var log syncBuffer
	k, _ := reloadKernel(t, path, &log, nil)
	grow := func() {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write([]byte(strings.Repeat(" ", kernel.MaxConfigFileBytes))); err != nil {
			t.Fatal(err)
		}
	}
	device := func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/zero", path); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func()
		want   string
	}{
		{"grown", grow, "larger than"},
		{"device", device, "character device"},
	} {
		tc.change()
		res, err := kernel.ReloadResult(k.Reload())
		var fe *fs.PathError
		if res != kernel.ReloadInvalid || !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Reload = %q, %v; want invalid, saying %q", tc.name, res, err, tc.want)
		}
		if p := k.PolicyFor("test.echo"); p.PermitLimit != 2 {
			t.Errorf("%s: PermitLimit in force = %d, want 2", tc.name, p.PermitLimit)
		}
	}
}
