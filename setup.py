import concurrent.futures
import os
import types

from setuptools import find_packages, setup


def compile_in_parallel(
    compiler,
    sources,
    output_dir=None,
    macros=None,
    include_dirs=None,
    debug=0,
    extra_preargs=None,
    extra_postargs=None,
    depends=None,
):
    """distutils' ``CCompiler.compile`` with its per-source ``_compile`` calls run in threads."""
    macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs
    )
    cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

    def compile_one(obj):
        source, extension = build[obj]
        compiler._compile(obj, source, extension, cc_args, extra_postargs, pp_opts)

    with concurrent.futures.ThreadPoolExecutor(max(1, len(os.sched_getaffinity(0)))) as pool:
        list(pool.map(compile_one, [obj for obj in objects if obj in build]))
    return objects


def compiled_kernels():
    """The C++ kernels (fairseq_monoattn/csrc: the encoder's GRU loop, the decoder step's GRU update,
    location focus and mix, the decoder's whole training loop), built where torch can be imported
    at build time (``pip install --no-build-isolation``) and a C++ compiler works; else the package
    installs without them and runs the Python code (the same function, slower)."""
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        return {}
    extension = CppExtension(
        "fairseq_monoattn._kernels",
        [f"fairseq_monoattn/csrc/{name}.cpp" for name in ("bindings", "packed_gru", "step_nodes", "decoder_loop")],
        extra_compile_args=["-O3"],
        optional=True,  # a failed build warns and installs the rest
    )

    class BuildKernels(BuildExtension.with_options(use_ninja=False)):
        def build_extensions(self):
            # one compiler process a source file, as many at once as this process has cores (setuptools
            # compiles them one after another; ninja, which would not, is not a requirement here)
            self.compiler.compile = types.MethodType(compile_in_parallel, self.compiler)
            super().build_extensions()

        def copy_file(self, infile, outfile, *args, **kwargs):
            # An in-place build (pip install -e) copies the library over the one in the package.
            # Unlink it first: a running training that has loaded the old file keeps it, where a
            # copy into the same file would change the pages under it (a crash, SIGBUS).
            if os.path.isfile(outfile) and os.path.isfile(infile):
                os.unlink(outfile)
            return super().copy_file(infile, outfile, *args, **kwargs)

    return {"ext_modules": [extension], "cmdclass": {"build_ext": BuildKernels}}


setup(
    name="fairseq-monoattn",
    version="0.3.0",
    description="Monotonic location attention for length generalisation (ICML 2023) as a fairseq plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    # the plugin, and beside it the experiment lab (which imports the plugin; the plugin never imports it)
    packages=find_packages(include=["fairseq_monoattn", "fairseq_monoattn.*", "monoattn_lab", "monoattn_lab.*"]),
    package_data={
        "fairseq_monoattn.data": ["files/**/*"],
        "fairseq_monoattn": ["csrc/*.cpp", "csrc/*.h"],
        "monoattn_lab": ["paper_values.tsv", "field_values.tsv"],  # the paper's and the field's numbers
    },
    include_package_data=True,
    entry_points={
        "console_scripts": [
            "fairseq-monoattn-prepare = fairseq_monoattn.cli.prepare:main",
            "fairseq-monoattn-lookup-tables = fairseq_monoattn.cli.lookup_tables:main",
            "fairseq-monoattn-run = monoattn_lab.cli.run:main",
            "fairseq-monoattn-compare = monoattn_lab.cli.compare:main",
            "fairseq-monoattn-sweep = monoattn_lab.cli.sweep:main",
            "fairseq-monoattn-aggregate = monoattn_lab.cli.aggregate:main",
            "fairseq-monoattn-score = fairseq_monoattn.cli.score:main",
            "fairseq-monoattn-plot-attention = fairseq_monoattn.cli.plot_attention:main",
            "fairseq-monoattn-user-dir = fairseq_monoattn.cli.user_dir:main",
            "fairseq-monoattn-convert = monoattn_lab.cli.convert:main",
        ],
    },
    python_requires=">=3.8",
    install_requires=[
        # fairseq 0.12.2 does not build on Python >= 3.11; fairseq-fixed is the same code, patched.
        'fairseq==0.12.2; python_version < "3.11"',
        'fairseq-fixed==0.12.3.1; python_version >= "3.11"',
        "torch>=1.13",
        "sacrebleu>=2.0",
        "numpy",
    ],
    extras_require={
        # NLTK: the reference edit distance in the tests; xdist: the suite on every core
        "test": ["pytest>=7", "pytest-xdist>=3.2", "nltk>=3.7"],
        "dev": ["ruff==0.17.6", "mkdocs==1.6.1"],  # make lint, make docs (both run by make test)
        "plots": ["matplotlib>=3.5"],
        "slurm": ["submitit>=1.4"],
    },
    **compiled_kernels(),
)
