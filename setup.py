"""Install the top-level folders as one namespace: `client/` becomes `burrow.client`, and so on.

The folders stay at the repository's top level (the layout the project is specified with); installed,
nothing generic lands in site-packages. Everything else about the distribution is in pyproject.toml.
"""

from setuptools import find_packages, setup

TOP_LEVEL = ["common", "wire", "mailbox_server", "transit_relay", "packet_relay", "client", "spark",
             "messaging", "discovery"]
PRESENT = [top for top in TOP_LEVEL if find_packages(include=[top])]

setup(
    packages=[f"burrow.{top}{sub}" for top in PRESENT
              for sub in [""] + [f".{p}" for p in find_packages(top)]],
    package_dir={f"burrow.{top}": top for top in PRESENT},
)
