#!/usr/bin/env bash
# The test bed's node: containerd and kubelet, run by testbed.sh as the first process of a
# private mount and PID namespace (unshare --mount --pid --fork --mount-proc). Everything they
# see that is fixed on the machine (/sys/fs/cgroup, /run/containerd, /run/netns, /var/lib/cni,
# /var/log/containers, the sysctls kubelet sets) is replaced here by the node's own, so the
# machine keeps its cgroups, sysctls and directories; and when this process dies the kernel
# kills every process the node started (shims, pods).
#
#   node.sh NODE_DIR CGROUP
#
# NODE_DIR holds containerd.toml, kubelet.yaml, kubelet.kubeconfig and the node's state;
# CGROUP is the name of the cgroup (a child of the cgroup2 root) the node's processes live in.
set -euo pipefail
NODE=$1 CGROUP=$2
KUBELET=${KUBELET:?the kubelet binary}
NODE_NAME=${NODE_NAME:?the node name}
NODE_IP=${NODE_IP:?the node address, on its bridge}
LOGS=${NODE_LOGS:?the log directory}

# runc on cgroup v1 would move containers out of the machine's cgroups, and kubelet refuses
# v1: the node gets a cgroup2 of its own. Its processes move into a cgroup the test bed
# creates, and a cgroup namespace makes that cgroup the root of what they see.
if [ "${NODE_STAGE:-}" != cgroup-namespace ]; then
  mount -t cgroup2 cgroup2 /sys/fs/cgroup
  mkdir -p "/sys/fs/cgroup/$CGROUP"
  echo $$ >"/sys/fs/cgroup/$CGROUP/cgroup.procs"
  umount /sys/fs/cgroup
  NODE_STAGE=cgroup-namespace exec unshare --cgroup "$0" "$@"
fi
mount -t cgroup2 cgroup2 /sys/fs/cgroup

# Fixed paths of containerd, CNI and kubelet get private, empty directories. A mount point
# missing on the machine is created and listed, so that `down` removes it again.
for dir in /run/containerd /run/netns /var/lib/cni /var/log/containers; do
  if [ ! -d "$dir" ]; then mkdir -p "$dir" && echo "$dir" >>"$NODE/created-dirs"; fi
  mount -t tmpfs -o mode=0755 node "$dir"
done

# kubelet writes machine-wide sysctls to the values it expects; files holding those values
# over the entries make it find them set, and the machine's values stay as they are.
mkdir -p "$NODE/sysctl"
for setting in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
  kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
  key=${setting%=*}
  echo "${setting#*=}" >"$NODE/sysctl/${key//\//.}"
  mount --bind "$NODE/sysctl/${key//\//.}" "/proc/sys/$key"
done

containerd --config "$NODE/containerd.toml" >"$LOGS/containerd.log" 2>&1 &
for _ in $(seq 100); do [ -S "$NODE/containerd.sock" ] && break; sleep 0.1; done
"$KUBELET" --config "$NODE/kubelet.yaml" --kubeconfig "$NODE/kubelet.kubeconfig" \
  --root-dir "$NODE/kubelet" --cert-dir "$NODE/kubelet/pki" \
  --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" >"$LOGS/kubelet.log" 2>&1 &
# Either one ending ends the node (and, with this process, everything in its namespace).
wait -n
