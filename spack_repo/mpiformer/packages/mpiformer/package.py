# Spack recipe for mpiformer (Spack 1.x, Package API v2).
#
#   spack install mpiformer +openmp                # CPU: Kokkos OpenMP + oneDNN and OpenBLAS
#   spack install mpiformer +openmp ~onednn        # CPU, OpenBLAS only (no bf16 products)
#   spack install mpiformer +cuda cuda_arch=80     # GPUs: Kokkos CUDA + cuBLAS
#   module load mpiformer, or spack load mpiformer once `spack repo add` registered this
#   repository  ->  mpiformer-train, mpiformer-generate, mpiformer-eval, mpiformer-tokenize,
#                   mpiformer-plan on PATH

import os

from spack_repo.builtin.build_systems.cmake import CMakeBuilder, CMakePackage
from spack_repo.builtin.build_systems.cuda import CudaPackage

from spack.package import *


class Mpiformer(CMakePackage, CudaPackage):
    """GPT-2 training (llm.c's model and file formats) in C++17 with Kokkos kernels, a GEMM
    backend (oneDNN or OpenBLAS on CPUs, cuBLAS on CUDA GPUs), fp32 or bf16 mixed precision, and
    MPI parallelism."""

    homepage = "https://example.invalid/mpiformer"
    # Placeholder: the project has no public repository yet. Point `git` at your clone, or build
    # this checkout through the environment in spack.yaml at the project root (a `develop` spec).
    git = "https://example.invalid/mpiformer.git"

    version("main", branch="main")

    variant("openmp", default=True, description="OpenMP host threads (Kokkos OpenMP backend)")
    variant("tests", default=False, description="Build the GoogleTest suite")
    variant(
        "onednn",
        default=True,
        description="oneDNN as the default CPU GEMM library (bf16 products on CPUs with "
        "AVX512_BF16 or AMX); OpenBLAS stays available (--gemm openblas)",
    )

    depends_on("cxx", type="build")
    depends_on("cmake@3.20:", type="build")

    # Any MPI. With +cuda, the trainer asks the MPI library at run time whether it takes device
    # pointers (--gpu-aware-mpi auto, the default: MPIX_Query_cuda_support() where the library has
    # it, as MPICH 4 and Open MPI do; an MPI without that query counts as not CUDA-aware). Where it
    # does not, every message goes through pinned host buffers (the staged path): correct with any
    # MPI, slower. --gpu-aware-mpi yes|no overrides the answer. For the direct path use a
    # CUDA-aware MPI: ^mpich+cuda, ^openmpi+cuda (with fabrics=ucx, UCX +cuda), or a site's
    # Cray MPICH as an external, run with MPICH_GPU_SUPPORT_ENABLED=1.
    depends_on("mpi")

    # The CPU backend calls OpenBLAS (cblas.h, libopenblas). Its OpenMP build shares one thread
    # pool with the kernels; a pthreads OpenBLAS competes with it for the cores.
    depends_on("blas")
    requires("^[virtuals=blas] openblas", msg="mpiformer's CPU backend is written against OpenBLAS")
    depends_on("openblas threads=openmp", when="+openmp ^[virtuals=blas] openblas")
    # oneDNN 2.x or 3.x, its OpenMP build (one thread pool with the kernels and OpenBLAS); the
    # CPU backend only, so not with +cuda.
    depends_on("onednn@2.6: cpu_runtime=omp gpu_runtime=none", when="+onednn ~cuda")

    # Kokkos 4 (tested with 4.6). Kokkos 5 requires C++20 and has not been tried.
    depends_on("kokkos@4.0:4")
    depends_on("kokkos+openmp", when="+openmp")
    # CUDA: Kokkos on the same GPU architecture, extended lambdas, compiled through nvcc_wrapper.
    depends_on("kokkos+cuda+cuda_lambda+wrapper", when="+cuda")
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
    conflicts("+cuda", when="cuda_arch=none", msg="+cuda needs a GPU architecture: cuda_arch=80")

    # The tokenizer: Oniguruma (Hugging Face's regex engine) and utf8proc (Unicode 15 data).
    depends_on("pkgconfig", type="build")
    depends_on("oniguruma")
    depends_on("utf8proc")

    depends_on("googletest+gmock", when="+tests")

    def _openblas_paths(self):
        """(libopenblas, the directory holding its cblas.h) for the OpenBLAS in the spec.

        headers.directories is no answer: Spack reduces a header's path to the `include`
        directory above it, and Debian's OpenBLAS (an external with prefix /usr) keeps cblas.h in
        include/<triplet>/openblas-<threads>/, beside a cblas.h of the alternatives system that may
        belong to another BLAS. OpenBLAS's own cblas.h sits next to its openblas_config.h, which it
        includes; among those, the one of the spec's threading comes first, and the library is
        taken from the directory of the same name when there is one (Debian's openblas-openmp)."""
        blas = self.spec["blas"]
        try:
            found = list(blas.headers)
        except NoHeadersError:
            found = []
        found = [h for h in found if os.path.basename(h) == "cblas.h"]
        if not found:
            found = find(blas.prefix.include, "cblas.h", recursive=True)
        if not found:
            raise InstallError(f"{blas.name}: no cblas.h under {blas.prefix.include}")
        # Debian's directories for the two threaded builds: openblas-openmp, openblas-pthread
        threads = None
        if blas.satisfies("threads=openmp"):
            threads = "openmp"
        elif blas.satisfies("threads=pthreads"):
            threads = "pthread"

        def rank(header):
            directory = os.path.dirname(header)
            own = os.path.exists(os.path.join(directory, "openblas_config.h"))
            named = bool(threads) and os.path.basename(directory).endswith("-" + threads)
            return (not own, not named)

        cblas_dir = os.path.dirname(sorted(found, key=rank)[0])
        libs = list(blas.libs)
        family = os.path.basename(cblas_dir)
        beside = [lib for lib in libs if os.path.basename(os.path.dirname(lib)) == family]
        return (beside or libs)[0], cblas_dir

    def cmake_args(self):
        spec = self.spec
        openblas_library, cblas_dir = self._openblas_paths()
        args = [
            self.define_from_variant("MPIFORMER_ENABLE_OPENMP", "openmp"),
            self.define_from_variant("MPIFORMER_ENABLE_CUDA", "cuda"),
            self.define_from_variant("MPIFORMER_ENABLE_TESTS", "tests"),
            # Spack's compiler wrappers add the flags for the concretized target.
            self.define("MPIFORMER_NATIVE", False),
            # The OpenBLAS in the spec, not whichever libopenblas the system search finds first.
            self.define("MPIFORMER_OPENBLAS_LIBRARY", openblas_library),
            self.define("MPIFORMER_CBLAS_INCLUDE_DIR", cblas_dir),
            self.define("MPIFORMER_ENABLE_ONEDNN", spec.satisfies("+onednn ~cuda")),
            # nvcc parses Kokkos once per compiler call: batching sources halves a CUDA build.
            self.define("MPIFORMER_UNITY_BUILD", spec.satisfies("+cuda")),
        ]
        if spec.satisfies("+onednn ~cuda"):
            # The onednn package installs libdnnl (its name since oneDNN 1.x) and declares no libs.
            onednn = spec["onednn"].prefix
            dnnl = find_libraries("libdnnl", root=onednn, shared=True, recursive=True)
            args.append(self.define("MPIFORMER_ONEDNN_INCLUDE_DIR", onednn.include))
            args.append(self.define("MPIFORMER_ONEDNN_LIBRARY", dnnl[0]))
        if spec.satisfies("+cuda"):
            args.append(CMakeBuilder.define_cuda_architectures(self))
            # Kokkos CUDA code is compiled as C++ through Kokkos' nvcc_wrapper.
            args.append(self.define("CMAKE_CXX_COMPILER", self["kokkos"].kokkos_cxx))
        return args

    def setup_run_environment(self, env):
        """`module load mpiformer` and `spack load mpiformer` also give the launcher (mpiexec) of
        the MPI mpiformer was built with, unless that MPI lives in a system prefix, whose bin/ is
        on PATH already. spack.yaml's modules autoload nothing (see there)."""
        mpi = self.spec["mpi"]
        if os.path.normpath(mpi.prefix) not in ("/", "/usr", "/usr/local"):
            env.prepend_path("PATH", mpi.prefix.bin)
        # Kokkos 4's OpenMP backend warns on every rank when OMP_PROC_BIND is unset. This is also
        # the interactive environment, where mpiexec binds no ranks and OpenMP binding would put
        # every rank's threads on the same first cores: bind nothing here. The job scripts
        # (ci/slurm) bind threads inside the cores srun gives each rank, setting both again.
        env.set("OMP_PROC_BIND", "false")
        env.set("OMP_PLACES", "cores")

    def check(self):
        """Build-time tests (spack install --test=root): everything but the PyTorch cross-check
        (needs torch), the Slurm smoke test and the delivery checks (install tree, Spack files,
        nvcc)."""
        if self.spec.satisfies("~tests"):
            return
        with working_dir(self.build_directory):
            ctest("--output-on-failure", "--label-exclude", "reference|slurm|delivery")

    def test_train_help(self):
        """mpiformer-train --help prints the usage"""
        train = which(self.prefix.bin.join("mpiformer-train"), required=True)
        out = train("--help", output=str.split, error=str.split)
        assert "usage:" in out

    def test_generate_help(self):
        """mpiformer-generate --help prints the usage"""
        generate = which(self.prefix.bin.join("mpiformer-generate"), required=True)
        out = generate("--help", output=str.split, error=str.split)
        assert "usage:" in out

    def test_eval_help(self):
        """mpiformer-eval --help prints the usage"""
        evaluate = which(self.prefix.bin.join("mpiformer-eval"), required=True)
        out = evaluate("--help", output=str.split, error=str.split)
        assert "usage:" in out

    def test_tokenize_help(self):
        """mpiformer-tokenize --help prints the usage"""
        tokenize = which(self.prefix.bin.join("mpiformer-tokenize"), required=True)
        out = tokenize("--help", output=str.split, error=str.split)
        assert "usage:" in out
