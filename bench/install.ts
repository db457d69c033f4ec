/**
 * What a user installs: `npm pack` of the built repository, the tarball
 * installed offline with `npm install --omit=dev` into an empty project (test/support/package.ts),
 * then the installed command timed: `mcp-store --version` (the command itself and through npx),
 * and a start on an empty services file to the first answered `GET /health`, with the RSS then.
 * Reports the tarball's files and sizes and the installed size and files, the largest packages
 * first. `npm run bench` runs it as its `install` section; alone:
 *
 *   npx tsx bench/install.ts [--runs 5] [--write]
 *
 * prints the table; --write puts its section into bench/RESULTS.md (between its own markers,
 * replacing an earlier one). It builds dist/ first when a source is newer.
 */
import { execFile } from "node:child_process"
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs, promisify } from "node:util"
import { cleanEnv, ensureBuilt, folderSize, packAndInstall } from "../test/support/package.js"
import { memoryMb, ROOT, startStore, stopAll, stopChild } from "./procs.js"
import { writeMarkedSection } from "./report.js"

const run = promisify(execFile)

export interface InstallFigures {
  readonly tarballFiles: number
  readonly packedBytes: number
  readonly unpackedBytes: number
  readonly installBytes: number
  /** Disk usage of node_modules (`du -sk`: whole blocks, as a file system counts it). */
  readonly installDiskBytes: number
  readonly installFiles: number
  readonly packages: number
  readonly installMs: number
  /** The largest installed packages: name and bytes. */
  readonly largest: ReadonlyArray<{ readonly name: string; readonly bytes: number }>
  /** `mcp-store --version` (the installed command) and `npx mcp-store --version`, per run, ms. */
  readonly versionMs: ReadonlyArray<number>
  readonly npxVersionMs: ReadonlyArray<number>
  /** Spawn to the first answered GET /health (empty services file), per run, ms; RSS then, MB. */
  readonly startMs: ReadonlyArray<number>
  readonly startRssMb: ReadonlyArray<number>
  /** The 1-minute load average before the timings. */
  readonly load: string
}

/** Each top-level package of node_modules (scoped ones one by one). */
const packagesOf = (modules: string): Array<{ name: string; bytes: number }> => {
  const out: Array<{ name: string; bytes: number }> = []
  for (const name of readdirSync(modules)) {
    if (name.startsWith(".")) continue
    if (name.startsWith("@")) {
      for (const inner of readdirSync(join(modules, name))) out.push({ name: `${name}/${inner}`, bytes: folderSize(join(modules, name, inner)).bytes })
    } else {
      out.push({ name, bytes: folderSize(join(modules, name)).bytes })
    }
  }
  return out.sort((a, b) => b.bytes - a.bytes)
}

const timed = async (command: string, args: ReadonlyArray<string>, cwd: string): Promise<number> => {
  const started = performance.now()
  await run(command, [...args], { cwd, env: cleanEnv(), timeout: 60_000 })
  return performance.now() - started
}

/** Packs, installs and measures in `dir` (left for the caller to remove). */
export const runInstall = async (dir: string, options: { runs: number; log: (line: string) => void }): Promise<InstallFigures> => {
  const { log } = options
  await ensureBuilt()
  mkdirSync(dir, { recursive: true })
  const installed = await packAndInstall(dir)
  const modules = join(installed.app, "node_modules")
  const size = folderSize(modules)
  const installDiskBytes = Number((await run("du", ["-sk", modules])).stdout.split("\t")[0]) * 1024
  const packages = packagesOf(modules)
  log(`  tarball ${installed.files.length} files, ${(installed.packedBytes / 1e6).toFixed(2)} MB packed, ${(installed.unpackedBytes / 1e6).toFixed(2)} MB unpacked`)
  log(`  production install: ${(size.bytes / 1e6).toFixed(1)} MB (${(installDiskBytes / 1e6).toFixed(1)} MB on disk), ${size.files} files, ${packages.length} packages (npm install --offline --omit=dev: ${(installed.installMs / 1000).toFixed(1)} s)`)
  const load = loadavg()[0]!.toFixed(2)
  const bin = join(modules, ".bin", "mcp-store")
  const versionMs: number[] = []
  const npxVersionMs: number[] = []
  for (let i = 0; i < options.runs; i++) {
    versionMs.push(await timed(bin, ["--version"], installed.app))
    npxVersionMs.push(await timed("npx", ["--offline", "mcp-store", "--version"], installed.app))
  }
  const startMs: number[] = []
  const startRssMb: number[] = []
  for (let i = 0; i < options.runs; i++) {
    const file = join(dir, `start-${i}.json`)
    writeFileSync(file, JSON.stringify({ mcpServers: {} }))
    const store = await startStore(file, { name: "store (installed package)", script: join(modules, "mcp-store", "dist", "mcp-store.mjs") })
    startMs.push(store.startMs)
    startRssMb.push(memoryMb(store.child.pid).rss)
    await stopChild(store.child)
  }
  const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  log(`  --version: ${median(versionMs).toFixed(0)} ms (npx: ${median(npxVersionMs).toFixed(0)} ms); start to /health ${median(startMs).toFixed(0)} ms, RSS ${median(startRssMb).toFixed(0)} MB (medians of ${options.runs})`)
  return {
    tarballFiles: installed.files.length,
    packedBytes: installed.packedBytes,
    unpackedBytes: installed.unpackedBytes,
    installBytes: size.bytes,
    installDiskBytes,
    installFiles: size.files,
    packages: packages.length,
    installMs: installed.installMs,
    largest: packages.slice(0, 8),
    versionMs,
    npxVersionMs,
    startMs,
    startRssMb,
    load
  }
}

export const INSTALL_START = "<!-- install: written by bench/install.ts -->"
export const INSTALL_END = "<!-- /install -->"

/** The section of bench/RESULTS.md, between its markers. */
export const installMarkdown = (f: InstallFigures, commit: string): string => {
  const sorted = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)
  const stats = (xs: ReadonlyArray<number>, digits = 0) => {
    const s = sorted(xs)
    return `${s[Math.floor(s.length / 2)]!.toFixed(digits)} | ${s[0]!.toFixed(digits)} | ${s[s.length - 1]!.toFixed(digits)}`
  }
  const mb = (bytes: number) => (bytes / 1e6).toFixed(1)
  return [
    INSTALL_START,
    "## The installed package",
    "",
    `\`npm pack\` of the built repository (${commit}), installed into an empty project with \`npm install --offline --omit=dev\` ` +
      `(bench/install.ts, test/support/package.ts). Sizes are the files' apparent sizes unless said; MB = 10^6 bytes. ` +
      `Load average when timed: ${f.load}.`,
    "",
    "| | |",
    "|---|---:|",
    `| tarball files | ${f.tarballFiles} |`,
    `| tarball, packed | ${(f.packedBytes / 1e6).toFixed(2)} MB |`,
    `| tarball, unpacked | ${(f.unpackedBytes / 1e6).toFixed(2)} MB |`,
    `| production install (node_modules) | ${mb(f.installBytes)} MB (${mb(f.installDiskBytes)} MB on disk, \`du\`), ${f.installFiles} files, ${f.packages} packages |`,
    `| \`npm install\` (offline, from the cache) | ${(f.installMs / 1000).toFixed(1)} s |`,
    "",
    `Largest installed packages: ${f.largest.map((p) => `${p.name} ${mb(p.bytes)} MB`).join(", ")}.`,
    "",
    `| ${f.versionMs.length} runs each | p50 | min | max |`,
    "|---|---:|---:|---:|",
    `| \`mcp-store --version\` (the installed command), ms | ${stats(f.versionMs)} |`,
    `| \`npx mcp-store --version\`, ms | ${stats(f.npxVersionMs)} |`,
    `| start to the first answered \`GET /health\` (empty services file), ms | ${stats(f.startMs)} |`,
    `| RSS then, MB | ${stats(f.startRssMb)} |`,
    INSTALL_END
  ].join("\n")
}

/** Puts the section into a results file: in place of an earlier one, or at the end. */
export const writeInstallSection = (file: string, section: string): void => writeMarkedSection(file, INSTALL_START, INSTALL_END, section)

const gitCommit = async (): Promise<string> => {
  try {
    return (await run("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT })).stdout.trim()
  } catch {
    return "unknown commit"
  }
}

// Run alone: `npx tsx bench/install.ts [--runs 5] [--write]`.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { runs: { type: "string", default: "5" }, write: { type: "boolean", default: false } }, strict: true })
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-install-"))
  try {
    const figures = await runInstall(dir, { runs: Number(values.runs), log: (line) => console.log(line) })
    const section = installMarkdown(figures, await gitCommit())
    console.log(`\n${section}`)
    if (values.write) {
      writeInstallSection(join(ROOT, "bench", "RESULTS.md"), section)
      console.log("\nWritten: bench/RESULTS.md")
    }
  } finally {
    await stopAll()
    rmSync(dir, { recursive: true, force: true })
  }
}
