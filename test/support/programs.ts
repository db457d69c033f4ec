/**
 * The TypeScript programs tests start as child processes, bundled with esbuild so that a start is a
 * plain `node <file>.mjs`: the store (src/cli-entry.ts) and the MCP servers of test/fixtures and
 * examples/. Run through tsx instead, every start resolved and compiled hundreds of modules through
 * its loader: about 6 s of CPU for a store on an idle machine (four times the bundle's), about 1 s
 * for a stdio fixture (three times), and a suite starts several stores and hundreds of fixtures.
 *
 * The bundles are built with the program's own esbuild options (scripts/bundle-options.mjs, what
 * `npm run build` ships in dist/) into `.dist-test-<kind>-<hash>/`
 * at the repository root (git-ignored with `.dist-*`), where `<hash>` is the hash of every source
 * they are built from: sources that change get a new folder, unchanged ones are reused by the next
 * run. The fixtures, the reference server and the store are built before the tests, side by side
 * (`prebuild`, from global-setup.ts); a program missing later (its sources changed during a watch)
 * is built when asked for. The store's folder is a child of the root like dist/ (src/version.ts reads ../package.json
 * from its module; src/ui/page.ts reads dashboard.html beside it). A build goes to a folder of its
 * own that is renamed into place, so processes that build at once (the two forks) never see half
 * a bundle. Outside vitest (bench/ imports the support modules) the programs run through tsx as
 * before, and MCPSTORE_TEST_TSX=1 does the same in tests (e.g. for stack traces into the sources).
 *
 * The MCP conformance suite's command (@modelcontextprotocol/conformance, started once a scenario) is
 * bundled the same way, on first use (`conformanceProgram`): its dist/index.js imports express,
 * Octokit, undici, zod and more, a hundred-odd modules resolved and compiled at every start. So are
 * the MCP Inspector's CLI (`inspectorProgram`, on first use) and the reference server,
 * server-everything (`everythingProgram`, built by `prebuild` with the fixtures).
 */
import { build, buildSync, type BuildOptions } from "esbuild"
import { execFile, execFileSync } from "node:child_process"
import { createHash } from "node:crypto"
import { copyFileSync, cpSync, existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, isAbsolute, join, relative } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { promisify } from "node:util"
import { bundleOptions } from "../../scripts/bundle-options.mjs"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href

/** Whether programs run from bundles: in vitest, unless MCPSTORE_TEST_TSX=1. */
const bundled = (): boolean => process.env["VITEST"] === "true" && process.env["MCPSTORE_TEST_TSX"] !== "1"

/** The stdio servers tests start (paths from the repository root), bundled together. */
const FIXTURE_PROGRAMS: ReadonlyArray<string> = [
  "test/fixtures/stdio-fixture.ts",
  "test/fixtures/era-stdio.ts",
  "test/fixtures/conformance-server.ts",
  "test/fixtures/strict-server.ts",
  "test/fixtures/rich-tools-server.ts",
  "test/fixtures/hostile-stdio.ts",
  "test/fixtures/records-writer.ts",
  "examples/demo-server.ts"
]

/**
 * The stdio servers tests start from a startup snapshot (`node --snapshot-blob <blob> -- [flags]`),
 * with the entry the snapshot is built from. The stdio fixture is started some two hundred times a
 * run: from its bundle, a start compiled 1.5 MB of code and built the SDK's zod schemas (measured: 0.26 s
 * of CPU a start, `node -e 0` 0.1 s); from the snapshot, whose heap has them already, 0.15 s. A
 * snapshot loads only in a node with the V8 flags it was built with, and the processes that start
 * these programs do not agree on NODE_OPTIONS (a store gives its stdio servers a few safe variables,
 * not NODE_OPTIONS; a test that spawns one itself passes its own environment): so snapshots are
 * built and used only when NODE_OPTIONS is empty, and built without it. With NODE_OPTIONS set, or
 * when a snapshot cannot be built, the program runs from its bundle (built too; the latter warns).
 */
const SNAPSHOT_PROGRAMS: Readonly<Record<string, string>> = {
  "test/fixtures/stdio-fixture.ts": "test/fixtures/stdio-fixture-snapshot.ts",
  "test/fixtures/era-stdio.ts": "test/fixtures/era-stdio.ts"
}

/** The snapshot of the program at `path` (from the root), in the fixtures' folder. */
const snapshotBlob = (dir: string, path: string): string => join(dir, path.replace(/\.ts$/, ".blob"))

/** The command that builds the startup snapshot `blob` from `script`, without NODE_OPTIONS (see `SNAPSHOT_PROGRAMS`). */
const snapshotCommand = (script: string, blob: string) => {
  const { NODE_OPTIONS: _none, ...env } = process.env
  return { args: ["--snapshot-blob", blob, "--build-snapshot", script], options: { cwd: dirname(script), env } }
}
/** A snapshot that could not be built: warned about, and no blob is left (the bundle runs instead). */
const snapshotFailed = (program: string, blob: string, error: unknown): void => {
  rmSync(blob, { force: true })
  console.warn(`${program}: no startup snapshot (its bundle runs instead): ${String((error as { stderr?: unknown }).stderr ?? error)}`)
}

/**
 * What a build does, step after step: esbuild bundles, startup snapshots, folder copies. Run
 * synchronously where a test asks for a program its run's global setup did not build (the sources
 * changed since), else asynchronously by the global setup, the builds side by side.
 */
type Step =
  | { readonly bundle: BuildOptions }
  | { readonly snapshot: { readonly program: string; readonly script: string; readonly blob: string } }
  | { readonly copy: { readonly from: string; readonly to: string } }

const runSync = (steps: ReadonlyArray<Step>): void => {
  for (const step of steps) {
    if ("bundle" in step) buildSync(step.bundle)
    else if ("copy" in step) cpSync(step.copy.from, step.copy.to, { recursive: true })
    else {
      const { program, script, blob } = step.snapshot
      const { args, options } = snapshotCommand(script, blob)
      try {
        execFileSync(process.execPath, args, { ...options, stdio: ["ignore", "ignore", "pipe"] })
      } catch (error) {
        snapshotFailed(program, blob, error)
      }
    }
  }
}

const execFileAsync = promisify(execFile)
const runAsync = async (steps: ReadonlyArray<Step>): Promise<void> => {
  for (const step of steps) {
    if ("bundle" in step) await build(step.bundle)
    else if ("copy" in step) cpSync(step.copy.from, step.copy.to, { recursive: true })
    else {
      const { program, script, blob } = step.snapshot
      const { args, options } = snapshotCommand(script, blob)
      try {
        await execFileAsync(process.execPath, args, options)
      } catch (error) {
        snapshotFailed(program, blob, error)
      }
    }
  }
}

/** A build of `kind`: its folder (see `target`) and its steps, which write into `temporary`. */
interface Plan {
  readonly kind: string
  readonly name: string
  readonly dir: string
  readonly temporary: string
  readonly steps: ReadonlyArray<Step>
}

/** Runs the plan's steps when its folder is missing, then moves the build into place. */
const carryOut = (plan: Plan): void => {
  if (existsSync(plan.dir)) return
  runSync(plan.steps)
  settle(plan.temporary, plan.dir)
  removeStale(plan.kind, plan.name)
}
const carryOutAsync = async (plan: Plan): Promise<void> => {
  if (existsSync(plan.dir)) return
  await runAsync(plan.steps)
  settle(plan.temporary, plan.dir)
  removeStale(plan.kind, plan.name)
}

/** Whether startup snapshots are built and used: only without NODE_OPTIONS (see `SNAPSHOT_PROGRAMS`). */
const SNAPSHOTS = (process.env["NODE_OPTIONS"] ?? "").trim() === ""
/** The node a snapshot is built by (it loads only in the same), and whether there are snapshots: part of the builds' folder names. */
const SNAPSHOT_SALT = `${process.version} ${process.arch} ${SNAPSHOTS ? "snapshots" : "bundles"}`

/** What every bundle depends on besides its sources: the dependencies' versions and the build options. */
const COMMON_INPUTS = ["package-lock.json", "scripts/bundle-options.mjs"]

/** Files under `path` (a file or a folder), recursively, sorted. */
const filesUnder = (path: string): string[] => {
  const full = join(ROOT, path)
  if (!existsSync(full)) return []
  if (!statSync(full).isDirectory()) return [path]
  return readdirSync(full, { withFileTypes: true })
    .flatMap((entry) => filesUnder(join(path, entry.name)))
    .sort()
}

/** A short hash of the names and contents of every file under `inputs`. */
const hashOf = (inputs: ReadonlyArray<string>, salt: string): string => {
  const hash = createHash("sha256").update(`${salt}\0`)
  for (const file of inputs.flatMap(filesUnder)) hash.update(`${file}\0`).update(readFileSync(join(ROOT, file))).update("\0")
  return hash.digest("hex").slice(0, 16)
}

/** Folders of other builds of `kind` last changed over an hour ago, and builds left half-done: removed. */
const removeStale = (kind: string, keep: string): void => {
  const hourAgo = Date.now() - 3_600_000
  for (const name of readdirSync(ROOT)) {
    if (name === keep || !(name.startsWith(`.dist-test-${kind}-`) || name.startsWith(`.dist-test-tmp-${kind}-`))) continue
    try {
      if (statSync(join(ROOT, name)).mtimeMs < hourAgo) rmSync(join(ROOT, name), { recursive: true, force: true })
    } catch {
      // removed meanwhile
    }
  }
}

/** The folder a build of `kind` from `inputs` goes to, and the temporary folder to build it in. */
const target = (kind: string, inputs: ReadonlyArray<string>, salt = "") => {
  const name = `.dist-test-${kind}-${hashOf([...inputs, ...COMMON_INPUTS], salt)}`
  return { name, dir: join(ROOT, name), temporary: join(ROOT, `.dist-test-tmp-${kind}-${process.pid}-${Date.now()}`) }
}

/** Moves a finished build into place; when another process was first, its build is kept. */
const settle = (temporary: string, dir: string): void => {
  try {
    renameSync(temporary, dir)
  } catch (error) {
    rmSync(temporary, { recursive: true, force: true })
    if (!existsSync(dir)) throw error
  }
}

const common: BuildOptions = { ...bundleOptions, sourcemap: false, logLevel: "error" }

/** A third-party program (an npm package's entry) as one ESM bundle for Node 20. */
const PACKAGE_BUNDLE: BuildOptions = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  // CommonJS dependencies inside the bundle still call require().
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
  logLevel: "error"
}

let fixtureDir: string | undefined

/** The fixtures' build: their bundles, then the snapshots' CommonJS entries and blobs. */
const fixturesPlan = (): Plan => {
  const { name, dir, temporary } = target("fixtures", ["test/fixtures", "examples", "test/support/programs.ts"], SNAPSHOT_SALT)
  const steps: Step[] = [
    { bundle: { ...common, entryPoints: FIXTURE_PROGRAMS.map((p) => join(ROOT, p)), outdir: temporary, outbase: ROOT, outExtension: { ".js": ".mjs" } } }
  ]
  for (const [program, entry] of SNAPSHOTS ? Object.entries(SNAPSHOT_PROGRAMS) : []) {
    // A snapshot's entry is one CommonJS script that requires only node's own modules.
    const script = join(temporary, entry.replace(/\.ts$/, ".cjs"))
    steps.push({ bundle: { ...common, banner: {}, format: "cjs", entryPoints: [join(ROOT, entry)], outfile: script } })
    steps.push({ snapshot: { program, script, blob: snapshotBlob(temporary, program) } })
  }
  return { kind: "fixtures", name, dir, temporary, steps }
}

/**
 * The folder of the fixture bundles: built by the run's global setup (`prebuild`), before any test,
 * so that no test's event loop stops for a build; built here (synchronously) when missing.
 */
export const fixtureBundles = (): string => {
  if (fixtureDir !== undefined) return fixtureDir
  const plan = fixturesPlan()
  carryOut(plan)
  return (fixtureDir = plan.dir)
}

const snapshotsMade = new Map<string, boolean>()
/** Whether the snapshot of the program at `path` (from the root) was built. */
const snapshotMade = (path: string): boolean => {
  let made = snapshotsMade.get(path)
  if (made === undefined) snapshotsMade.set(path, (made = existsSync(snapshotBlob(fixtureBundles(), path))))
  return made
}

/**
 * The node arguments that run the TypeScript program at `path` (absolute, or from the repository
 * root): its startup snapshot or its bundle, or `--import <tsx> <path>` outside vitest and for a program not bundled.
 */
export const programArgs = (path: string): ReadonlyArray<string> => {
  const fromRoot = isAbsolute(path) ? relative(ROOT, path) : path
  // `--`: the program's flags are not node's.
  if (bundled() && SNAPSHOT_PROGRAMS[fromRoot] !== undefined && snapshotMade(fromRoot)) return ["--snapshot-blob", snapshotBlob(fixtureBundles(), fromRoot), "--"]
  if (!bundled() || !FIXTURE_PROGRAMS.includes(fromRoot)) return ["--import", TSX_LOADER, join(ROOT, fromRoot)]
  return [join(fixtureBundles(), fromRoot.replace(/\.ts$/, ".mjs"))]
}

let storeProgram: Promise<string> | undefined

/**
 * The script that runs the `mcp-store` program: its bundle (built by `prebuild`, or here when missing), or
 * scripts/dev.mjs (the sources through tsx) outside vitest.
 */
export const storeScript = (): Promise<string> => {
  if (!bundled()) return Promise.resolve(join(ROOT, "scripts", "dev.mjs"))
  storeProgram ??= (async () => {
    const { name, dir, temporary } = target("store", ["src"])
    if (!existsSync(dir)) {
      // As scripts/build.mjs builds dist/mcp-store.mjs: split at the entry's dynamic imports.
      await build({
        ...common,
        entryPoints: { "mcp-store": join(ROOT, "src", "cli-entry.ts") },
        outdir: temporary,
        splitting: true,
        outExtension: { ".js": ".mjs" },
        chunkNames: "mcp-store-[hash]"
      })
      copyFileSync(join(ROOT, "src", "ui", "dashboard.html"), join(temporary, "dashboard.html"))
      settle(temporary, dir)
      removeStale("store", name)
    }
    return join(dir, "mcp-store.mjs")
  })()
  storeProgram.catch(() => (storeProgram = undefined))
  return storeProgram
}

let conformanceBuild: Promise<string> | undefined

/** The conformance suite's command, as the package ships it. */
const CONFORMANCE_ENTRY = "node_modules/@modelcontextprotocol/conformance/dist/index.js"

/**
 * The MCP conformance suite's command as one bundle (built on first use): a start from it takes
 * about a third of the CPU of a start from the package (measured: 0.55 s against 1.6 s with the loader
 * hook it needed on Node 20). The suite imports `globSync` from "fs", which Node 20 lacks: the
 * bundle takes it from fs when there, else has a function that throws (the suite uses it only to
 * gather result files, never in the server scenarios the tests run).
 */
export const conformanceProgram = (): Promise<string> => {
  conformanceBuild ??= (async () => {
    // This file is an input: it says how the bundle is made.
    const { name, dir, temporary } = target("conformance", [CONFORMANCE_ENTRY, "node_modules/@modelcontextprotocol/conformance/package.json", "test/support/programs.ts"])
    if (!existsSync(dir)) {
      const entry = join(ROOT, CONFORMANCE_ENTRY)
      const source = readFileSync(entry, "utf8")
      if (!source.includes("globSync as o,")) throw new Error(`${CONFORMANCE_ENTRY}: its globSync import changed; see conformanceProgram() in test/support/programs.ts`)
      // Appended: a function declaration is hoisted, so `o` is defined before the suite's code runs.
      const globSync = `
import * as __conformanceFs from "fs";
function o(...args) {
  if (typeof __conformanceFs.globSync !== "function") throw new Error("globSync needs Node 22");
  return __conformanceFs.globSync(...args);
}
`
      await build({
        stdin: { contents: source.replace("globSync as o,", "") + globSync, resolveDir: dirname(entry), sourcefile: entry, loader: "js" },
        ...PACKAGE_BUNDLE,
        outfile: join(temporary, "conformance.mjs")
      })
      settle(temporary, dir)
      removeStale("conformance", name)
    }
    return join(dir, "conformance.mjs")
  })()
  conformanceBuild.catch(() => (conformanceBuild = undefined))
  return conformanceBuild
}

let inspectorBuild: Promise<string> | undefined

/** The MCP Inspector's CLI, as the package ships it. */
const INSPECTOR_ENTRY = "node_modules/@modelcontextprotocol/inspector-cli/build/index.js"

/**
 * The MCP Inspector's CLI (@modelcontextprotocol/inspector-cli, one process per request) as one
 * bundle (built on first use): a start from it takes about half the CPU of a start from the package
 * (measured: 0.45 s against 1.0 s), which resolves and compiles the SDK's modules, commander and zod
 * at every start. Outside vitest the package's own entry runs.
 */
export const inspectorProgram = (): Promise<string> => {
  if (!bundled()) return Promise.resolve(join(ROOT, INSPECTOR_ENTRY))
  inspectorBuild ??= (async () => {
    // Its build folder follows the package's version (package-lock.json is a common input).
    const { name, dir, temporary } = target("inspector", [INSPECTOR_ENTRY, "test/support/programs.ts"])
    if (!existsSync(dir)) {
      await build({
        entryPoints: [join(ROOT, INSPECTOR_ENTRY)],
        ...PACKAGE_BUNDLE,
        outfile: join(temporary, "inspector.mjs")
      })
      settle(temporary, dir)
      removeStale("inspector", name)
    }
    return join(dir, "inspector.mjs")
  })()
  inspectorBuild.catch(() => (inspectorBuild = undefined))
  return inspectorBuild
}

let everythingFile: string | undefined

/** What the reference server's stdio launcher (dist/transports/stdio.js) does, as the snapshot's main function repeats it. */
const EVERYTHING_STDIO_LAUNCHER = [
  'console.error("Starting default (STDIO) server...");',
  "const transport = new StdioServerTransport();",
  "const { server, cleanup } = createServer();",
  "await server.connect(transport);",
  'process.on("SIGINT", async () => {',
  "await server.close();",
  "cleanup();",
  "process.exit(0);",
  'console.error("Server error:", error);'
]

/**
 * The reference server over stdio as the entry of a startup snapshot (resolved from its package's
 * dist/): its server (server/index.js, with the SDK) evaluated while the snapshot is built, and its
 * stdio launcher's steps as the main function (the launcher runs them when imported, which a
 * snapshot cannot wait for). Its modules find their folder (for docs/) with import.meta.url, which
 * a CommonJS script lacks: the main function sets it from the blob's place, dist/ of its build.
 * A start: 0.17 s of CPU against 0.30 s from its bundle (measured, 20 starts each).
 */
const EVERYTHING_STDIO_SNAPSHOT = `
import { startupSnapshot } from "node:v8";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { createServer } from "./server/index.js";
startupSnapshot.setDeserializeMainFunction(() => {
  const blob = process.execArgv[process.execArgv.indexOf("--snapshot-blob") + 1];
  globalThis.__everythingModuleUrl = pathToFileURL(join(dirname(blob), "index.mjs")).href;
  console.error("Starting default (STDIO) server...");
  async function main() {
    const transport = new StdioServerTransport();
    const { server, cleanup } = createServer();
    await server.connect(transport);
    process.on("SIGINT", async () => {
      await server.close();
      cleanup();
      process.exit(0);
    });
  }
  main().catch((error) => {
    console.error("Server error:", error);
    process.exit(1);
  });
});
`

/** The reference server's package folder and entry point (`mcp-server-everything`). */
const EVERYTHING_PACKAGE = dirname(createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/package.json"))
const EVERYTHING_ENTRY = join(EVERYTHING_PACKAGE, "dist", "index.js")

/** The reference server's build: its bundle beside a copy of its docs, and its stdio snapshot. */
const everythingPlan = (): Plan => {
  const relativeToRoot = relative(ROOT, EVERYTHING_PACKAGE)
  // Its build folder follows the package's version (package-lock.json is a common input) and this file.
  const { name, dir, temporary } = target("everything", [join(relativeToRoot, "package.json"), "test/support/programs.ts"], SNAPSHOT_SALT)
  const steps: Step[] = [
    { bundle: { entryPoints: [EVERYTHING_ENTRY], ...PACKAGE_BUNDLE, outfile: join(temporary, "dist", "index.mjs") } },
    { copy: { from: join(EVERYTHING_PACKAGE, "dist", "docs"), to: join(temporary, "docs") } }
  ]
  // With NODE_OPTIONS set, no snapshot: the bundle runs (see SNAPSHOT_PROGRAMS).
  const launcher = SNAPSHOTS && !existsSync(dir) ? readFileSync(join(EVERYTHING_PACKAGE, "dist", "transports", "stdio.js"), "utf8") : undefined
  if (launcher !== undefined && EVERYTHING_STDIO_LAUNCHER.every((line) => launcher.includes(line))) {
    const script = join(temporary, "dist", "stdio.cjs")
    steps.push({
      bundle: {
        stdin: { contents: EVERYTHING_STDIO_SNAPSHOT, resolveDir: join(EVERYTHING_PACKAGE, "dist"), sourcefile: "everything-stdio-snapshot.js", loader: "js" },
        ...PACKAGE_BUNDLE,
        banner: {},
        format: "cjs",
        define: { "import.meta.url": "globalThis.__everythingModuleUrl" },
        outfile: script
      }
    })
    steps.push({ snapshot: { program: "server-everything", script, blob: join(temporary, "dist", "stdio.blob") } })
  } else if (launcher !== undefined) console.warn("server-everything: its dist/transports/stdio.js changed (see EVERYTHING_STDIO_SNAPSHOT, test/support/programs.ts): no startup snapshot")
  return { kind: "everything", name, dir, temporary, steps }
}

/**
 * The reference server (@modelcontextprotocol/server-everything) as one bundle: built by the run's
 * global setup like the fixtures, here (synchronously) when missing. A start from it takes about
 * two thirds of the CPU of a start from the package (measured: 0.4 s against 0.6 s), and the suite
 * starts it some thirty times. The server reads its `docs` folder (its instructions and file
 * resources) at `<its module's folder>/../docs`: the bundle is `dist/index.mjs` of its build folder,
 * beside a copy of the package's `dist/docs`. Outside vitest the package's own entry runs.
 */
export const everythingProgram = (): string => {
  if (!bundled()) return EVERYTHING_ENTRY
  if (everythingFile !== undefined) return everythingFile
  const plan = everythingPlan()
  carryOut(plan)
  return (everythingFile = join(plan.dir, "dist", "index.mjs"))
}

/**
 * The run's global setup (test/support/global-setup.ts): the programs most files start, built side
 * by side when their sources changed: the fixtures, the reference server and the store. Built by the
 * first test that needs it instead, the store's bundle was built by every fork at once in a fresh
 * clone (the slowest files, started first, all start stores), and the fixtures' and the reference
 * server's builds ran one after the other while no test could start.
 */
export const prebuild = async (): Promise<void> => {
  if (!bundled()) return
  await Promise.all([carryOutAsync(fixturesPlan()), carryOutAsync(everythingPlan()), storeScript()])
}

/**
 * The node arguments that run the reference server over stdio: its startup snapshot (built with its
 * bundle), or its bundle or its package's entry with `stdio`.
 */
export const everythingStdioArgs = (): ReadonlyArray<string> => {
  const program = everythingProgram()
  const blob = join(dirname(program), "stdio.blob")
  return bundled() && existsSync(blob) ? ["--snapshot-blob", blob, "--"] : [program, "stdio"]
}

const packagePrograms = new Map<string, string>()

/**
 * An npm package's program (its `dist/index.js`, as `server-filesystem` and `server-memory` ship
 * theirs) as one ESM bundle, built on first use and kept for later runs (its folder follows the
 * package's version): a start from it costs about 0.2 s of CPU against 0.5 s from the package's
 * modules. Outside vitest, the package's own entry.
 */
export const packageProgram = (pkg: string): string => {
  const packageDir = dirname(createRequire(import.meta.url).resolve(`${pkg}/package.json`))
  const entry = join(packageDir, "dist", "index.js")
  if (!bundled()) return entry
  let file = packagePrograms.get(pkg)
  if (file !== undefined) return file
  const kind = `package-${pkg.replace(/^@/, "").replace(/\//g, "-")}`
  const { name, dir, temporary } = target(kind, [join(relative(ROOT, packageDir), "package.json"), "test/support/programs.ts"])
  if (!existsSync(dir)) {
    buildSync({ entryPoints: [entry], ...PACKAGE_BUNDLE, outfile: join(temporary, "index.mjs") })
    settle(temporary, dir)
    removeStale(kind, name)
  }
  packagePrograms.set(pkg, (file = join(dir, "index.mjs")))
  return file
}
