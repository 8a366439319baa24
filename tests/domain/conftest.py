"""Shared fixtures for the domain tests: the packaged policies and template catalog."""

from __future__ import annotations

import pytest

import policies
import templates
from domain.policy import Policy, load_policy
from domain.templates import TemplateVersion


@pytest.fixture(scope="session")
def default_policy() -> Policy:
    return load_policy(policies.load_packaged("default"))


@pytest.fixture(scope="session")
def demo_policy() -> Policy:
    return load_policy(policies.load_packaged("demo"))


@pytest.fixture(scope="session")
def catalog() -> list[TemplateVersion]:
    return templates.load_packaged()
