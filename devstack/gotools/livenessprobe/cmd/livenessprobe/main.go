// Command livenessprobe serves /healthz for a CSI driver: 200 when the driver's Identity Probe
// answers ready within --probe-timeout, 500 otherwise (an error, a timeout, or ready=false), as
// kubernetes-csi/livenessprobe does (same flags, same answers, the same csi-lib-utils calls).
//
// cloudloop's stack builds this stand-in because the Go module proxy it reaches does not serve
// github.com/kubernetes-csi/livenessprobe; the chart runs the upstream image. Like upstream, it
// asks the driver's name once at start (exiting when the driver does not answer) and dials the
// socket afresh for every request, so a hung or restarted driver is seen at the next probe.
package main

import (
	"context"
	"flag"
	"net"
	"net/http"
	"time"

	connlib "github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

var (
	probeTimeout = flag.Duration("probe-timeout", time.Second, "Probe timeout in seconds.")
	csiAddress   = flag.String("csi-address", "/run/csi/socket", "Address of the CSI driver socket.")
	healthzPort  = flag.String("health-port", "9808", "TCP port for /healthz requests.")
	httpEndpoint = flag.String("http-endpoint", "", "The TCP address of the /healthz and "+
		"metrics server (host:port); overrides --health-port.")
	metricsPath = flag.String("metrics-path", "/metrics", "The HTTP path of the metrics.")
)

type healthProbe struct {
	driverName     string
	metricsManager metrics.CSIMetricsManager
}

func connect(ctx context.Context, manager metrics.CSIMetricsManager) (*grpc.ClientConn, error) {
	return connlib.Connect(ctx, *csiAddress, manager, connlib.WithTimeout(*probeTimeout))
}

func (h *healthProbe) checkProbe(w http.ResponseWriter, req *http.Request) {
	ctx, cancel := context.WithTimeout(req.Context(), *probeTimeout)
	defer cancel()
	conn, err := connect(ctx, h.metricsManager)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(err.Error()))
		klog.ErrorS(err, "Failed to establish connection to CSI driver")
		return
	}
	defer func() { _ = conn.Close() }()
	ready, err := rpc.Probe(ctx, conn)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(err.Error()))
		klog.ErrorS(err, "Health check failed")
		return
	}
	if !ready {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("driver responded but is not ready"))
		klog.ErrorS(nil, "Driver responded but is not ready")
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("ok"))
	klog.V(5).InfoS("Health check succeeded")
}

func main() {
	klog.InitFlags(nil)
	flag.Set("logtostderr", "true")
	flag.Parse()

	manager := metrics.NewCSIMetricsManagerForSidecar("")
	conn, err := connlib.Connect(context.Background(), *csiAddress, manager)
	if err != nil {
		klog.ErrorS(err, "Failed to establish connection to CSI driver")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	name, err := rpc.GetDriverName(context.Background(), conn)
	_ = conn.Close()
	if err != nil {
		klog.ErrorS(err, "Failed to get CSI driver name")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.InfoS("CSI driver name", "driver", name)
	manager.SetDriverName(name)

	probe := &healthProbe{driverName: name, metricsManager: manager}
	mux := http.NewServeMux()
	manager.RegisterToServer(mux, *metricsPath)
	mux.HandleFunc("/healthz", probe.checkProbe)
	addr := net.JoinHostPort("0.0.0.0", *healthzPort)
	if *httpEndpoint != "" {
		addr = *httpEndpoint
	}
	klog.InfoS("ServeMux listening", "address", addr)
	if err := http.ListenAndServe(addr, mux); err != nil {
		klog.ErrorS(err, "Failed to start HTTP server")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}
