"""`dllm-lsp ray {deploy,status,delete}`: the denoiser as a Ray Serve deployment (docs/deploy.md).

  deploy   start (or update) the deployment on the Ray cluster at --address and wait until it serves
  status   the deployment's replicas (alive or not) and their request counters, at once however busy
  delete   remove the deployment
"""
from __future__ import annotations

import argparse
import json

from dllm_lsp.cli_errors import refuse_unknown_choice, report as report_error

from .ray_serve import APP_NAME, RemoteUnavailable, ReplicaConfig, deploy, replica_status, undeploy


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dllm-lsp ray", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="verb", required=True)
    for name in ("deploy", "status", "delete"):
        p = sub.add_parser(name)
        p.add_argument("--address", required=True, help="the Ray cluster's GCS address, HOST:PORT (or auto)")
        p.add_argument("--app", default=APP_NAME, help="Serve application name")
        if name == "deploy":
            p.add_argument("--model", default="default", help="model folder (on every node) or a shipped model")
            p.add_argument("--device", default="auto", help="auto, cpu, cuda (each replica's own GPU)")
            p.add_argument("--replicas", type=int, default=1)
            p.add_argument("--autoscale", default=None, metavar="MIN:MAX",
                           help="scale between MIN and MAX replicas on ongoing requests (instead of --replicas)")
            p.add_argument("--target-ongoing", type=float, default=2.0,
                           help="autoscaling: ongoing requests per replica to aim for")
            p.add_argument("--num-gpus", type=float, default=None, help="GPUs per replica (default: 1 on cuda)")
            p.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per replica")
            p.add_argument("--max-ongoing", type=int, default=8, help="requests a replica holds at once")
    ap.commands = sub.choices      # name -> its parser, for refuse_unknown_choice
    return ap


def config_of(a) -> ReplicaConfig:
    autoscale = None
    if a.autoscale:
        low, _, high = a.autoscale.partition(":")
        if not (low.isdecimal() and high.isdecimal()) or not 0 <= int(low) <= int(high) or int(high) < 1:
            raise ValueError(f"--autoscale wants MIN:MAX with 0 <= MIN <= MAX, MAX >= 1, not {a.autoscale!r}")
        autoscale = (int(low), int(high))
    if a.replicas < 1:
        raise ValueError("--replicas must be at least 1")
    gpus = a.num_gpus if a.num_gpus is not None else (1.0 if a.device.startswith("cuda") else 0.0)
    return ReplicaConfig(model=a.model, device=a.device, replicas=a.replicas, num_cpus=a.num_cpus, num_gpus=gpus,
                         autoscale=autoscale, target_ongoing_requests=a.target_ongoing,
                         max_ongoing_requests=a.max_ongoing)


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    refuse_unknown_choice(ap, argv, ap.commands, "command")
    a = ap.parse_args(argv)
    try:
        if a.verb == "deploy":
            print(json.dumps(deploy(a.address, config_of(a), a.app)))
        elif a.verb == "status":
            print(json.dumps(replica_status(a.address, a.app), indent=1))
        else:
            undeploy(a.address, a.app)
    except (ValueError, TimeoutError, RemoteUnavailable) as exc:
        return report_error("dllm-lsp ray", exc)
    return 0
