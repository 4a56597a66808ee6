"""Which folders make the package; everything else about it is in pyproject.toml.

Three source folders install as one import namespace: `xlalint/` as `xlalint`, `rules/` as
`xlalint.rules`, `runtime/` as `xlalint.runtime`. pyproject.toml cannot map folders to other names
*and* find their subpackages, so they are found here: a new subpackage is packaged without
editing a list (a forgotten `xlalint.analysis` once broke every non-editable install).
"""

from setuptools import find_packages, setup

ROOTS = {"xlalint": "xlalint", "xlalint.rules": "rules", "xlalint.runtime": "runtime"}
# The rule pages (docs/rules/*.md) ship as data, so `xlalint explain` names a page that exists
# wherever xlalint is installed: `xlalint.docs` holds no code.
DATA = {"xlalint.docs": "docs", "xlalint.docs.rules": "docs/rules"}


def packages() -> list[str]:
    found = list(DATA)
    for name, folder in ROOTS.items():
        found.append(name)
        found.extend(f"{name}.{sub}" for sub in find_packages(folder))
    return found


setup(package_dir={**ROOTS, **DATA}, packages=packages())
