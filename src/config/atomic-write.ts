/**
 * Writing a file that holds secrets so that a crash never leaves it half written: the atomic
 * replace (a temporary file flushed and renamed over the old one), backups that never overwrite
 * and never follow a symlink, private file modes, and the clean-up of temporary files a killed
 * process left behind; reading such a file back, never through a symlink. Used for the services file
 * (src/config/services-file.ts) and the other files the store keeps beside it.
 */
import { randomBytes } from "node:crypto"
import { constants as fsConstants } from "node:fs"
import { lstat, open as openFile, readdir, rename, rm, stat, type FileHandle } from "node:fs/promises"
import { log } from "../logging/log.js"
import { refuseIfLockLost } from "./file-lock.js"
import { basename, dirname, join } from "node:path"

import { errnoCode } from "./errno-code.js"
export { errnoCode }

/** The mode of a file this store writes: 0600, or the old file's mode where it is stricter (never looser). */
const privateMode = (previous: number | undefined): number => (previous === undefined ? 0o600 : previous & 0o600)

/**
 * Replaces `path` with `text` so that a crash at any moment leaves the old or the new file: a
 * temporary file in the same folder, flushed, renamed over the old one, then the folder flushed.
 * The file holds secrets (env and header values): it is written with mode 0600, or the old file's
 * mode where that is stricter; its owner is kept when allowed. The temporary file is created new
 * (O_CREAT|O_EXCL: never an existing file, never through a symlink), 0600 from the start.
 *
 * Every step is a round trip to libuv's thread pool, and on a busy event loop each one waits for
 * a turn of the loop: the steps that do not depend on each other (reading the old file's mode,
 * creating the temporary file, opening the folder; setting mode and owner) run together.
 * Resolves with the file written (`WrittenFile`).
 */
export const writeAtomically = async (path: string, text: string): Promise<WrittenFile> => {
  await sweptOnce(path)
  const dir = dirname(path)
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`)
  const [previousResult, handleResult, folderResult] = await Promise.allSettled([
    lstat(path),
    openFile(tmp, "wx", 0o600),
    openFile(dir, "r")
  ])
  // A symlink in the file's place is replaced, not followed, and lends the new file neither its
  // target's mode nor its owner (someone who planted it would get the secrets).
  const previous = previousResult.status === "fulfilled" && !previousResult.value.isSymbolicLink() ? previousResult.value : undefined
  const folder = folderResult.status === "fulfilled" ? folderResult.value : undefined
  const created = handleResult.status === "fulfilled"
  let written: WrittenFile
  try {
    try {
      if (handleResult.status === "rejected") throw handleResult.reason
      const handle = handleResult.value
      try {
        const mode = privateMode(previous === undefined ? undefined : previous.mode & 0o7777)
        const owned = previous === undefined || (previous.uid === process.getuid?.() && previous.gid === process.getgid?.())
        await Promise.all([
          // The umask may have narrowed 0600 further when the file was created: that is kept.
          mode === 0o600 ? undefined : handle.chmod(mode),
          owned ? undefined : handle.chown(previous.uid, previous.gid).catch(() => undefined)
        ])
        await handle.writeFile(text, "utf8")
        await handle.sync()
        written = await handle.stat()
      } finally {
        await handle.close()
      }
      await refuseIfLockLost(path)
      await rename(tmp, path)
    } catch (e) {
      if (created) await rm(tmp, { force: true }).catch(() => undefined)
      throw e
    }
    // Best effort: some platforms and file systems cannot fsync a folder. The rename is done and
    // visible; only its durability across a power loss is then not confirmed.
    await folder?.sync().catch(() => undefined)
  } finally {
    // Closed on every path, a failed write included.
    await folder?.close().catch(() => undefined)
  }
  return written
}

/**
 * The file `writeAtomically` put in place, as its `stat` tells it: the rename keeps the inode, the
 * time and the size, so a later `stat` of the path that differs is another writer's file.
 */
export interface WrittenFile {
  readonly ino: number
  readonly mtimeMs: number
  readonly size: number
}

/**
 * A file the store could not read (another secret key, a damaged file, a hand edit left half done)
 * and is about to replace: first kept beside it (`writeBackup`), so that it can still be read with the right key.
 * Throws when it cannot be kept: the file is then not replaced.
 */
export const keepUnreadable = async (path: string, text: string, what: string, event: string): Promise<void> => {
  const kept = await writeBackup(path, text, 0o600)
  log.warn(`${what} ${path} could not be read: it is kept as ${kept} before a new one is written`, { event, file: path, backup: kept })
}

/** `20261123T034844Z`: a time for file names (no colons). */
const fileTime = (at: Date): string => at.toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z")

/**
 * Writes `text` to a new file beside `path`: `<path>.bak`, or when that name is taken (by a file,
 * a folder or a symlink) `<path>.<time>.bak`, then `<path>.<time>.<n>.bak`. Each name is created
 * with O_CREAT|O_EXCL|O_NOFOLLOW, so an existing file is never overwritten and a planted symlink
 * never followed. Mode 0600 (or `mode` where stricter). Resolves with the name written.
 */
export const writeBackup = async (path: string, text: string, mode: number | undefined): Promise<string> => {
  const time = fileTime(new Date())
  const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW
  for (let n = 0; ; n++) {
    const name = n === 0 ? `${path}.bak` : n === 1 ? `${path}.${time}.bak` : `${path}.${time}.${n - 1}.bak`
    let handle: FileHandle
    try {
      handle = await openFile(name, flags, 0o600)
    } catch (e) {
      const code = errnoCode(e)
      if ((code === "EEXIST" || code === "ELOOP" || code === "EISDIR") && n < 1000) continue
      throw e
    }
    try {
      const wanted = privateMode(mode)
      if (wanted !== 0o600) await handle.chmod(wanted)
      await handle.writeFile(text, "utf8")
      await handle.sync()
    } catch (e) {
      await handle.close().catch(() => undefined)
      await rm(name, { force: true }).catch(() => undefined)
      throw e
    }
    await handle.close()
    return name
  }
}

/** The paths whose stale temporary files this process has removed (`sweptOnce`). */
const swept = new Set<string>()

/**
 * Before this process first replaces `path`: the temporary files a killed process left beside it
 * are removed (`removeStaleTemporaries`), whichever file it is (records, asynchronous calls, keys,
 * tokens...). Once per path and process.
 */
export const sweptOnce = async (path: string): Promise<void> => {
  if (swept.has(path)) return
  swept.add(path)
  await removeStaleTemporaries(path)
}

/**
 * Removes the temporary files a process killed in the middle of `writeAtomically` (or of another
 * rewrite by a temporary file and a rename) left beside `path` (`.<name>.<pid>.<hex>.tmp`), when
 * that process no longer runs. Best effort. They hold a full copy of the file, secrets included,
 * and would pile up crash after crash.
 */
export const removeStaleTemporaries = async (path: string): Promise<void> => {
  const pattern = new RegExp(`^\\.${basename(path).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\.(\\d+)\\.[0-9a-f]+\\.tmp$`)
  let names: string[]
  try {
    names = await readdir(dirname(path))
  } catch {
    return
  }
  for (const name of names) {
    const pid = pattern.exec(name)?.[1]
    if (pid === undefined || Number(pid) === process.pid || processRuns(Number(pid))) continue
    await rm(join(dirname(path), name), { force: true }).catch(() => undefined)
  }
}

const processRuns = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return errnoCode(e) === "EPERM"
  }
}

/**
 * A file the store writes, read back at start, never through a symlink (one there could make the
 * store read, and then replace, another file): its text, `undefined` when it is absent, or `"link"`
 * when a symlink stands at its path (logged as an error with `event`: what it holds is then kept in
 * memory only). Any other failure is thrown.
 */
export const readOwnFile = async (path: string, what: string, event: string): Promise<string | undefined | "link"> => {
  try {
    const handle = await openFile(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW)
    try {
      return await handle.readFile("utf8")
    } finally {
      await handle.close()
    }
  } catch (e) {
    if (errnoCode(e) === "ENOENT") return undefined
    if (errnoCode(e) !== "ELOOP") throw e
    log.error(`${path} is a symbolic link: refused (never followed). ${what} are kept in memory only until it is replaced by a regular file and the store restarted.`, { event, file: path })
    return "link"
  }
}

/**
 * `readOwnFile`, parsed: the file's JSON value, `undefined` when it is absent or not JSON (then a
 * warning with `unreadable`: what the store does without it), or `"link"` as `readOwnFile` says.
 */
export const readOwnJson = async (
  path: string,
  what: string,
  events: { readonly refused: string; readonly unreadable: string },
  unreadable: string
): Promise<unknown> => {
  const text = await readOwnFile(path, what, events.refused)
  if (text === undefined || text === "link") return text
  try {
    return JSON.parse(text) as unknown
  } catch {
    log.warn(`${path} is not JSON: ${unreadable}`, { event: events.unreadable, file: path })
    return undefined
  }
}

/**
 * The writes of a file kept in memory, coalesced: `persist` starts a write, or, while one runs,
 * queues one more (one at most), which takes every change made meanwhile, and runs even when the
 * write before it failed. After `close` (which waits for both) nothing is written any more.
 */
export class CoalescedWrites {
  private writing: Promise<void> | undefined
  private next: Promise<void> | undefined
  private closed = false

  constructor(private readonly write: () => Promise<void>) {}

  persist(): Promise<void> {
    if (this.closed) return Promise.resolve()
    if (this.writing === undefined) {
      this.writing = this.write().finally(() => {
        this.writing = undefined
      })
      return this.writing
    }
    this.next ??= this.writing
      .catch(() => undefined)
      .then(() => {
        this.next = undefined
        return this.persist()
      })
    return this.next
  }

  async close(): Promise<void> {
    await this.next?.catch(() => undefined)
    await this.writing?.catch(() => undefined)
    this.closed = true
  }
}
