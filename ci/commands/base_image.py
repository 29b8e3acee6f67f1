"""``base-image``: bootstrap a Debian base image with debootstrap (no registry needed)."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import Command, check_ca_bundle
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    suite: str = "bookworm"
    mirror: str | None = None
    force: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", default="bookworm", choices=("bookworm", "trixie", "bullseye"),
                        help="the Debian release to bootstrap")
    parser.add_argument("--mirror", help="Debian mirror URL (default: FARM_DEBIAN_MIRROR, else the one /etc/apt uses)")
    parser.add_argument("--force", action="store_true", help="bootstrap again even when the image exists")


def run(opts: Options[Args]) -> int:
    from ci.linux import images
    from ci.log import log

    tag = images.bootstrap_base(opts.args.suite, opts.args.mirror, force=opts.args.force)
    log.result(f"base image {tag} ({images.image_size(tag) / 2**20:.0f} MiB)\n"
               f"point the cells at it: export FARM_BASE_IMAGE={images.BASE_REPO}")
    return 0


COMMAND = Command("base-image", "bootstrap a Debian base image (no registry needed)", configure, Args, run,
                  check=check_ca_bundle)
