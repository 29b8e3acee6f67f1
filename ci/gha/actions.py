"""The third-party GitHub Actions the generated workflows use, each pinned to the full commit of a release.

A tag can be moved; a commit cannot. Each pin is the commit its release tag points at (read from the
action's repository), and the tag is written as a comment after it so a reader (and Dependabot) sees
the version. Updating an action is one line here, then ``nox -s workflows``.

Standard library only.
"""

from __future__ import annotations

import dataclasses
import re

from ci.gha.yamlout import Commented

_SHA = re.compile(r"^[0-9a-f]{40}$")


@dataclasses.dataclass(frozen=True)
class Action:
    repo: str
    sha: str
    version: str

    def uses(self) -> Commented:
        return Commented(f"{self.repo}@{self.sha}", self.version)


def _pin(repo: str, sha: str, version: str) -> Action:
    if not _SHA.match(sha):
        raise ValueError(f"{repo}: pin {sha!r} is not a full commit SHA")
    return Action(repo, sha, version)


CHECKOUT = _pin("actions/checkout", "3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1")
SETUP_PYTHON = _pin("actions/setup-python", "5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0")
SETUP_GO = _pin("actions/setup-go", "b7ad1dad31e06c5925ef5d2fc7ad053ef454303e", "v7.0.0")
UPLOAD_ARTIFACT = _pin("actions/upload-artifact", "bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0")
DOWNLOAD_ARTIFACT = _pin("actions/download-artifact", "3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "v8.0.1")
CACHE = _pin("actions/cache", "27d5ce7f107fe9357f9df03efb73ab90386fccae", "v5.0.5")
ATTEST_BUILD_PROVENANCE = _pin("actions/attest-build-provenance", "a2bbfa25375fe432b6a289bc6b6cd05ecd0c4c32", "v4.1.0")
UPLOAD_PAGES_ARTIFACT = _pin("actions/upload-pages-artifact", "fc324d3547104276b827a68afc52ff2a11cc49c9", "v5.0.0")
DEPLOY_PAGES = _pin("actions/deploy-pages", "cd2ce8fcbc39b97be8ca5fce6e763baed58fa128", "v5.0.0")
DOCKER_LOGIN = _pin("docker/login-action", "4907a6ddec9925e35a0a9e82d7399ccc52663121", "v4.1.0")
GITHUB_SCRIPT = _pin("actions/github-script", "ed597411d8f924073f98dfc5c65a23a2325f34cd", "v8.0.0")
PYPI_PUBLISH = _pin("pypa/gh-action-pypi-publish", "ed0c53931b1dc9bd32cbe73a98c7f6766f8a527e", "v1.13.0")

ALL = (CHECKOUT, SETUP_PYTHON, SETUP_GO, UPLOAD_ARTIFACT, DOWNLOAD_ARTIFACT, CACHE, ATTEST_BUILD_PROVENANCE,
       UPLOAD_PAGES_ARTIFACT, DEPLOY_PAGES, DOCKER_LOGIN, GITHUB_SCRIPT, PYPI_PUBLISH)

#: actionlint, run by the CI workflow with `go run` (the Go checksum database verifies the module).
ACTIONLINT_MODULE = "github.com/rhysd/actionlint/cmd/actionlint"
ACTIONLINT_VERSION = "v1.7.12"
GO_VERSION = "1.25"
