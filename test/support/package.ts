/**
 * The npm package as a user gets it: `npm pack` of the repository, then the tarball installed into
 * an empty project with `npm install --offline --omit=dev`. Used by test/package and by the install
 * phase of the benchmark (bench/install.ts). Nothing is downloaded: every production dependency is
 * in the cache that `npm ci` filled, found through a lockfile made from the repository's.
 */
import { execFile } from "node:child_process"
import { mkdirSync, readdirSync, readFileSync, statSync, lstatSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { promisify } from "node:util"
import { REPO_ROOT } from "../fixtures/paths.js"

const run = promisify(execFile)

/** An environment without the repository's npm script context (npm_* variables) or store options. */
export const cleanEnv = (): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("npm_") && !k.startsWith("MCPSTORE_")))

const npm = (args: ReadonlyArray<string>, cwd: string, timeout = 180_000) =>
  run("npm", [...args], { cwd, env: cleanEnv(), timeout, maxBuffer: 16 * 1024 * 1024 })

/**
 * The lockfile of a project that depends on the tarball only: the repository's production packages
 * at the same places (the package's dependencies are hoisted in both). Without a lockfile npm
 * resolves each dependency from the registry's package documents, which `npm ci` does not cache;
 * with this one (each package with its registry address, which the repository's lockfile leaves
 * out) `npm install --offline` takes every package from the cache by its integrity.
 */
export const appLockfile = (dependency: string, integrity: string): object => {
  const lock = JSON.parse(readFileSync(join(REPO_ROOT, "package-lock.json"), "utf8")) as {
    packages: Record<string, Record<string, unknown> & { dev?: boolean }>
  }
  const { devDependencies: _dev, name: _name, ...root } = lock.packages[""]!
  const packages: Record<string, unknown> = {
    "": { name: "app", dependencies: { "mcp-store": dependency } },
    "node_modules/mcp-store": { ...root, resolved: dependency, integrity }
  }
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (path === "" || entry.dev === true) continue
    const name = path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length)
    const resolved = entry["resolved"] ?? `https://registry.npmjs.org/${name}/-/${name.split("/").pop()}-${String(entry["version"])}.tgz`
    packages[path] = { ...entry, resolved }
  }
  return { name: "app", lockfileVersion: 3, requires: true, packages }
}

/** A packed and installed package. */
export interface InstalledPackage {
  /** The tarball's path. */
  readonly tarball: string
  /** The paths in the tarball, sorted. */
  readonly files: ReadonlyArray<string>
  /** The tarball's size and the size of its files (bytes), as `npm pack` reports them. */
  readonly packedBytes: number
  readonly unpackedBytes: number
  /** The project the tarball is installed in (`<dir>/app`). */
  readonly app: string
  /** How long `npm install` took (ms). */
  readonly installMs: number
}

/** How to install. */
export interface InstallOptions {
  /**
   * `npm install --ignore-scripts`: the dependencies' install scripts are not run. Two have one, and
   * both only look for or build native add-ons the store never loads (the bundle leaves them out:
   * scripts/bundle-options.mjs): @parcel/watcher (of @effect/platform-node-shared) and msgpackr-extract
   * (optional, of msgpackr). The package itself has no install script. Measured: 1 to 3 s of CPU
   * less of 10 to 12. Default false (bench/install.ts times an install as a user runs it).
   */
  readonly ignoreScripts?: boolean
}

/**
 * Packs the repository as it is (dist/ must be built: `prepare` is not run again) into `dir` and
 * installs the tarball into `<dir>/app` with `npm install --offline --omit=dev`.
 */
export const packAndInstall = async (dir: string, options: InstallOptions = {}): Promise<InstalledPackage> => {
  const packed = await npm(["pack", "--ignore-scripts", "--json", "--pack-destination", dir], REPO_ROOT)
  const info = (
    JSON.parse(packed.stdout) as Array<{ filename: string; integrity: string; size: number; unpackedSize: number; files: Array<{ path: string }> }>
  )[0]!
  const app = join(dir, "app")
  mkdirSync(app)
  const dependency = `file:../${info.filename}`
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module", dependencies: { "mcp-store": dependency } }))
  writeFileSync(join(app, "package-lock.json"), JSON.stringify(appLockfile(dependency, info.integrity)))
  const started = performance.now()
  await npm(["install", "--offline", "--omit=dev", "--no-audit", "--no-fund", "--loglevel=error", ...(options.ignoreScripts === true ? ["--ignore-scripts"] : [])], app)
  return {
    tarball: join(dir, info.filename),
    files: info.files.map((f) => f.path).sort(),
    packedBytes: info.size,
    unpackedBytes: info.unpackedSize,
    app,
    installMs: performance.now() - started
  }
}

/** Bytes (apparent sizes) and files under a folder; symbolic links count as files of their own size. */
export const folderSize = (path: string): { bytes: number; files: number } => {
  const stat = lstatSync(path)
  if (!stat.isDirectory()) return { bytes: stat.size, files: 1 }
  let bytes = 0
  let files = 0
  for (const name of readdirSync(path)) {
    const inner = folderSize(join(path, name))
    bytes += inner.bytes
    files += inner.files
  }
  return { bytes, files }
}

/** The newest modification time of the files under `path` (a file or a folder). */
const newest = (path: string): number => {
  const stat = statSync(path)
  if (!stat.isDirectory()) return stat.mtimeMs
  return readdirSync(path).reduce((max, name) => Math.max(max, newest(join(path, name))), 0)
}

/** dist/ as `prepare` builds it from this tree's sources: rebuilt when a source is newer than it. */
export const ensureBuilt = async (): Promise<void> => {
  const entry = join(REPO_ROOT, "dist", "mcp-store.mjs")
  const sources = ["src", "examples", "scripts/build.mjs", "package.json", "tsconfig.json", "tsconfig.build.json"]
  let built = 0
  try {
    statSync(join(REPO_ROOT, "dist", "index.d.ts"))
    built = statSync(entry).mtimeMs
  } catch {
    built = 0
  }
  if (sources.some((s) => newest(join(REPO_ROOT, s)) > built)) {
    await run(process.execPath, [join(REPO_ROOT, "scripts", "build.mjs")], { cwd: REPO_ROOT, timeout: 300_000 })
  }
}
