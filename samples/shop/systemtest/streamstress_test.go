//go:build stress

package systemtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The idle streams beside unary calls (TestStressIdleStreams).
const (
	idleStreams     = 10_000
	idleStreamConns = 50 // 200 streams a connection, under the listener's 256
	unaryWarmUp     = 500
	unaryCalls      = 3000
)

// unaryLatencies reads the order n times, one call after another on one
// kept-alive connection, and returns the latencies, sorted.
func unaryLatencies(t *testing.T, url string, n int) []time.Duration {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		resp, err := hc.Get(url + "/orders/ord-1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		lat = append(lat, time.Since(t0))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /orders/ord-1: %d", resp.StatusCode)
		}
	}
	slices.Sort(lat)
	return lat
}

// maxSettleCalls bounds the calls settled makes.
const maxSettleCalls = 100_000

// settledFaults is the page faults a call under which the shop's heap
// has stopped growing: 0.07 to 0.15 with no stream open, 1.5 to 2.7
// while the heap grows.
const settledFaults = 0.5

// settled measures the calls once the shop's heap has stopped growing:
// a measure of unaryCalls calls that fault on fewer than settledFaults
// pages a call. It returns that measure and the calls made before it.
//
// The open streams raise the heap's goal. Until the heap has grown to
// it, the calls' garbage lands on pages the process never touched. Each
// such page costs a page fault, tens of µs on some VMs. Once the
// collector frees pages to reuse, the faults stop. That cost is the
// heap's growth, once; settled keeps it out of the figure for streams
// held open.
func settled(t *testing.T, url string, pid int) (phase, int) {
	t.Helper()
	calls := 0
	for {
		f0 := minorFaults(pid)
		unaryLatencies(t, url, unaryWarmUp)
		calls += unaryWarmUp
		if float64(minorFaults(pid)-f0)/unaryWarmUp >= settledFaults && calls < maxSettleCalls {
			continue
		}
		p := measure(t, url, pid)
		if p.faults < settledFaults {
			return p, calls
		}
		if calls += unaryCalls; calls >= maxSettleCalls {
			t.Errorf("the shop's heap still grew after %d calls", calls)
			return p, calls
		}
	}
}

// minorFaults returns the minor page faults of the process pid so far.
func minorFaults(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command (which may hold spaces): minflt is
	// the 10th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 8 {
		return -1
	}
	n, _ := strconv.ParseInt(f[7], 10, 64)
	return n
}

// phase is one measure of unaryCalls calls.
type phase struct {
	lat    []time.Duration // sorted
	faults float64         // the shop's minor page faults a call
	cpu    time.Duration   // the shop's CPU time a call
}

// measure measures unaryCalls calls of unaryLatencies on the shop pid.
func measure(t *testing.T, url string, pid int) phase {
	t.Helper()
	p := &attackedShop{pid: pid}
	f0, c0 := minorFaults(pid), p.cpu()
	lat := unaryLatencies(t, url, unaryCalls)
	return phase{lat: lat, faults: float64(minorFaults(pid)-f0) / unaryCalls,
		cpu: (p.cpu() - c0) / unaryCalls}
}

// String gives the phase's figures.
func (p phase) String() string {
	return fmt.Sprintf("p50 %v p99 %v, %.2f page faults and %v of the shop's CPU a call",
		quantile(p.lat, 0.5), quantile(p.lat, 0.99), p.faults, p.cpu.Round(time.Microsecond))
}

// quantile returns the q-quantile of sorted.
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// rssOf returns the resident memory of the process pid (VmRSS), in bytes.
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	_, rest, _ := strings.Cut(string(b), "VmRSS:")
	var kb int64
	if _, err := fmt.Sscan(rest, &kb); err != nil {
		return -1
	}
	return kb << 10
}

// idleWindow is how long idleCPU watches.
const idleWindow = 2 * time.Second

// idleCPU returns the CPU time the process pid spends in idleWindow.
func idleCPU(pid int) time.Duration {
	p := &attackedShop{pid: pid}
	before := p.cpu()
	time.Sleep(idleWindow)
	return p.cpu() - before
}

// TestStressIdleStreams runs the built shop (no race detector) with
// orders.watch's MaxStreams at 10,000. It measures GET /orders/{id}
// (orders.get) with no stream open. It opens 10,000 idle gRPC server
// streams on 50 connections from a process of its own. It measures the
// calls again, once right after, and once the shop's heap has stopped
// growing (see settled). It asserts what holds under any schedule: every stream
// opens, the 10,001st is refused with KERNEL_UNAVAILABLE_003, and SIGTERM
// ends all 10,000 with KERNEL_UNAVAILABLE_012 and exit 0 within the
// grace. It logs the figures: the unary p50 and p99 and page faults a
// call with none and with 10,000 open, and the shop's resident memory
// and goroutines per idle stream.
func TestStressIdleStreams(t *testing.T) {
	const grace = 60 * time.Second
	bin := buildShop(t)
	s := startStreamShop(t, []string{bin}, childEnv(), idleStreams, grace)
	s.createOrder(t)
	pid := s.cmd.Process.Pid
	unaryLatencies(t, s.url, unaryWarmUp)
	none := measure(t, s.url, pid)
	rss0, g0 := rssOf(pid), metricValue(s.url, "go_goroutines")
	idle0 := idleCPU(pid)

	h := startHolder(t, s.grpcAddr)
	openTook := h.line(t, "opened ")
	_, err := grpcWatch(t.Context(), dialShop(t, s.grpcAddr, 1)[0])
	st := status.Convert(err)
	if info := errorInfoOf(st); st.Code() != codes.Unavailable || info.GetReason() != "KERNEL_UNAVAILABLE_003" {
		t.Errorf("stream %d past MaxStreams: %v; want Unavailable KERNEL_UNAVAILABLE_003", idleStreams+1, err)
	}
	rss1, g1 := rssOf(pid), metricValue(s.url, "go_goroutines")
	idle1 := idleCPU(pid)
	first := measure(t, s.url, pid)
	withOpen, settleCalls := settled(t, s.url, pid)
	rss2 := rssOf(pid)

	gBefore, _ := strconv.Atoi(g0)
	gAfter, _ := strconv.Atoi(g1)
	t.Logf("%d idle gRPC streams on %d connections opened in %s", idleStreams, idleStreamConns, openTook)
	t.Logf("shop process: RSS %d MiB -> %d MiB (%.1f KiB a stream), goroutines %d -> %d (%.2f a stream)",
		rss0>>20, rss1>>20, float64(rss1-rss0)/1024/idleStreams, gBefore, gAfter,
		float64(gAfter-gBefore)/idleStreams)
	t.Logf("shop process: RSS %d MiB once the heap stopped growing (%.1f KiB a stream)",
		rss2>>20, float64(rss2-rss0)/1024/idleStreams)
	t.Logf("shop process's CPU time over %v without calls: %v with none open, %v with %d open",
		idleWindow, idle0, idle1, idleStreams)
	p99 := func(p phase) time.Duration { return quantile(p.lat, 0.99) }
	t.Logf("GET /orders/ord-1, %d calls in a row, none open: %v", unaryCalls, none)
	t.Logf("the first %d calls after the streams opened, as the heap grows: %v; p99 ratio %.2f",
		unaryCalls, first, float64(p99(first))/float64(p99(none)))
	t.Logf("%d open, once the heap stopped growing (%d calls more): %v; p99 ratio %.2f (bar 1.2)",
		idleStreams, settleCalls, withOpen, float64(p99(withOpen))/float64(p99(none)))

	sent := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var outcomes map[string]int
	if err := json.Unmarshal([]byte(h.line(t, "outcomes ")), &outcomes); err != nil {
		t.Fatal(err)
	}
	last := time.Since(sent)
	exitErr, took := s.waitExit(t, sent, grace)
	t.Logf("SIGTERM with %d open streams: every outcome %v after the signal, exit %v after %v; outcomes %v",
		idleStreams, last, exitErr, took, outcomes)
	if want := "Unavailable KERNEL_UNAVAILABLE_012"; len(outcomes) != 1 || outcomes[want] != idleStreams {
		t.Errorf("outcomes %v, want %d %q", outcomes, idleStreams, want)
	}
	if exitErr != nil || took > grace {
		t.Errorf("the shop exited with %v after %v, want 0 within its grace %v", exitErr, took, grace)
	}
}

// holderEnv gives the stream holder the shop's gRPC address.
const holderEnv = "STRESS_STREAM_HOLDER"

// holder is the process that holds the idle streams of
// TestStressIdleStreams, so that the calls measured share no process with
// them.
type holder struct{ lines chan string }

// startHolder runs TestStressIdleStreamHolder against the shop at addr.
func startHolder(t *testing.T, addr string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStressIdleStreamHolder$", "-test.count=1")
	cmd.Env, cmd.Stderr = append(os.Environ(), holderEnv+"="+addr), os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{lines: make(chan string, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "holder: "); ok {
				h.lines <- l
			}
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
	return h
}

// line returns the rest of the holder's next line, which must start with
// prefix.
func (h *holder) line(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-h.lines:
		rest, found := strings.CutPrefix(l, prefix)
		if !ok || !found {
			t.Fatalf("the holder said %q, want %q...", l, prefix)
		}
		return rest
	case <-time.After(2 * time.Minute):
		t.Fatalf("the holder said nothing in 2 minutes, want %q...", prefix)
		return ""
	}
}

// TestStressIdleStreamHolder is a part of TestStressIdleStreams, which
// runs it in a process of its own; alone, it skips. It opens the idle
// streams and says so on stdout, then waits for each one's end and
// prints the outcomes.
func TestStressIdleStreamHolder(t *testing.T) {
	addr := os.Getenv(holderEnv)
	if addr == "" {
		t.Skip("a part of TestStressIdleStreams")
	}
	conns := dialShop(t, addr, idleStreamConns)
	open := make([]grpc.ClientStream, idleStreams)
	var failed atomic.Int64
	var firstErr atomic.Value
	opened := time.Now()
	parallel(func(i int) {
		cs, err := grpcWatch(t.Context(), conns[i%idleStreamConns])
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
			return
		}
		open[i] = cs
	})
	if n := failed.Load(); n > 0 {
		fmt.Printf("holder: failed %d of %d streams; the first: %v\n", n, idleStreams, firstErr.Load())
		t.FailNow()
	}
	fmt.Printf("holder: opened %v\n", time.Since(opened))
	var mu sync.Mutex
	outcomes := map[string]int{}
	parallel(func(i int) {
		st := grpcOutcome(open[i])
		k := st.Code().String()
		if info := errorInfoOf(st); info != nil {
			k += " " + info.GetReason()
		}
		mu.Lock()
		outcomes[k]++
		mu.Unlock()
	})
	b, _ := json.Marshal(outcomes)
	fmt.Printf("holder: outcomes %s\n", b)
}

// parallel runs f for each stream index, on 100 goroutines.
func parallel(f func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			for i := range work {
				f(i)
			}
		})
	}
	for i := range idleStreams {
		work <- i
	}
	close(work)
	wg.Wait()
}

// bareServerEnv makes the test binary a bare server for
// TestStressIdleStreamsBare.
const bareServerEnv = "STRESS_BARE_SERVER"

// TestStressIdleStreamsBare measures what TestStressIdleStreams measures,
// on a server built of the bare libraries: net/http answers
// GET /orders/ord-1 with a fixed order's JSON, and grpc-go holds
// /shop.v1.Orders/Watch open after one message. The same holder opens the
// same 10,000 idle streams. Its figures are the baseline for the shop's:
// what 10,000 idle grpc-go streams cost a Go process's unary tail with no
// framework at all.
func TestStressIdleStreamsBare(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStressIdleStreamBareServer$", "-test.count=1")
	cmd.Env, cmd.Stderr = append(os.Environ(), bareServerEnv+"=1"), os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var url, grpcAddr string
	sc := bufio.NewScanner(stdout)
	for url == "" || grpcAddr == "" {
		if !sc.Scan() {
			t.Fatalf("the bare server printed no addresses: %v", sc.Err())
		}
		if a, ok := strings.CutPrefix(sc.Text(), "bare: serving HTTP on "); ok {
			url = a
		}
		if a, ok := strings.CutPrefix(sc.Text(), "bare: serving gRPC on "); ok {
			grpcAddr = a
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	pid := cmd.Process.Pid
	unaryLatencies(t, url, unaryWarmUp)
	none := measure(t, url, pid)
	rss0 := rssOf(pid)
	h := startHolder(t, grpcAddr)
	openTook := h.line(t, "opened ")
	rss1 := rssOf(pid)
	first := measure(t, url, pid)
	withOpen, settleCalls := settled(t, url, pid)
	rss2 := rssOf(pid)
	p99 := func(p phase) time.Duration { return quantile(p.lat, 0.99) }
	t.Logf("bare: %d idle gRPC streams on %d connections opened in %s; RSS %d MiB -> %d MiB (%.1f KiB a stream)",
		idleStreams, idleStreamConns, openTook, rss0>>20, rss1>>20, float64(rss1-rss0)/1024/idleStreams)
	t.Logf("bare: RSS %d MiB once the heap stopped growing (%.1f KiB a stream)",
		rss2>>20, float64(rss2-rss0)/1024/idleStreams)
	t.Logf("bare: GET /orders/ord-1, %d calls in a row, none open: %v", unaryCalls, none)
	t.Logf("bare: the first %d calls after the streams opened, as the heap grows: %v; p99 ratio %.2f",
		unaryCalls, first, float64(p99(first))/float64(p99(none)))
	t.Logf("bare: %d open, once the heap stopped growing (%d calls more): %v; p99 ratio %.2f",
		idleStreams, settleCalls, withOpen, float64(p99(withOpen))/float64(p99(none)))
}

// TestStressIdleStreamBareServer is a part of TestStressIdleStreamsBare,
// which runs it in a process of its own; alone, it skips. It serves until
// it is killed.
func TestStressIdleStreamBareServer(t *testing.T) {
	if os.Getenv(bareServerEnv) == "" {
		t.Skip("a part of TestStressIdleStreamsBare")
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type order struct {
		ID     string `json:"id"`
		Name   string `json:"name"`
		Amount int    `json:"amount"`
	}
	var mu sync.Mutex
	orders := map[string]order{"ord-1": {ID: "ord-1", Name: "lamp", Amount: 1}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		o, ok := orders[r.PathValue("id")]
		mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(o)
	})
	gs := grpc.NewServer()
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "shop.v1.Orders",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Watch", ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				if err := ss.RecvMsg(&emptypb.Empty{}); err != nil {
					return err
				}
				if err := ss.SendMsg(&emptypb.Empty{}); err != nil {
					return err
				}
				<-ss.Context().Done()
				return nil
			}}},
	}, nil)
	go func() { _ = gs.Serve(gl) }()
	fmt.Printf("bare: serving HTTP on http://%s\nbare: serving gRPC on %s\n", hl.Addr(), gl.Addr())
	_ = http.Serve(hl, mux)
}
