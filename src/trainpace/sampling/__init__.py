"""Background sampling of the device and the host: NVML (the one choke point), DCGM, psutil."""
