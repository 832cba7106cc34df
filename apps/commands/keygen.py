"""``zactors keygen``: write a CURVE keypair in pyzmq's certificate format."""
import argparse
import os
import socket

from zactors.actors.auth import create_keypair, load_keypair

__all__ = ["register"]


def register(subparsers):
    parser = subparsers.add_parser(
        "keygen", help="write a CURVE keypair (public + secret certificate files)",
        description="Write a CURVE keypair as two certificate files in pyzmq/CZMQ format: "
                    "NAME.key (public key: give it to peers, put it in a server's key directory) "
                    "and NAME.key_secret (both keys, mode 0600: keep it private).",
        epilog="Example: zactors keygen --dir ~/.curve --name server")
    parser.add_argument("--dir", default=".", help="directory for the files (created if missing; default: .)")
    parser.add_argument("--name", default=socket.gethostname().split(".")[0] or "zactors", type=_stem,
                        help="file name stem (default: this host's name)")
    parser.set_defaults(func=run)


def _stem(text):
    if not text:
        raise argparse.ArgumentTypeError("the name cannot be empty")
    if os.sep in text or text in (".", ".."):
        raise argparse.ArgumentTypeError("%r: give a file name, not a path (the folder is --dir)" % text)
    return text


def run(args):
    directory = os.path.abspath(os.path.expanduser(args.dir))
    public_path, secret_path = create_keypair(directory, args.name)
    keys = load_keypair(secret_path)
    print("public key  %s  (share it)" % public_path)
    print("secret key  %s  (keep private)" % secret_path)
    print("public z85  %s" % keys.public.decode())
    return 0
