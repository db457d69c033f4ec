/**
 * The process groups a store started for its local services, kept in a file beside the services
 * file, so that the processes of a store that ended without stopping them (SIGKILL, the OOM killer,
 * a crash of the machine's session) are ended by the next store that starts on the same folder,
 * instead of running on for ever. A store ends its own groups when it stops (src/mcp/stdio.ts); this
 * is for the stops it has no say in (the connections note their groups through `ProcessLedger`).
 *
 * Each store (each replica, each store of a process) has its own file, named after its process id;
 * a file whose owner still runs is never touched. A group is ended only while it is still the one
 * the store started: its leader has the start time written down, or the leader is gone and the
 * group still has members (Linux does not give a group's id to anyone else while it has members).
 * Linux only (it reads /proc); elsewhere the ledger does nothing.
 */
import { randomBytes } from "node:crypto"
import { constants as fsConstants, readFileSync } from "node:fs"
import { open, readdir, rm } from "node:fs/promises"
import { basename, dirname, join } from "node:path"
import { log } from "../logging/log.js"
import { groupRunning, signalGroup } from "../mcp/stdio.js"
import { noProcessLedger, type ProcessLedger } from "../mcp/types.js"
import { errnoCode, writeAtomically } from "./atomic-write.js"

/** A process as /proc says: its group and its start time (clock ticks since boot, as text). */
interface ProcStat {
  readonly pgrp: number
  readonly start: string
}

/** /proc/<pid>/stat, read: undefined when the process is gone (or this is not Linux). */
const procStat = (pid: number): ProcStat | undefined => {
  let text: string
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8")
  } catch {
    return undefined
  }
  // The command (field 2) is in parentheses and may hold spaces: the fields are read after the last ')'.
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ")
  // Field 3 is the state (index 0): a zombie has ended.
  if (fields[0] === "Z" || fields[0] === "X") return undefined
  const pgrp = Number(fields[2])
  const start = fields[19]
  return Number.isInteger(pgrp) && start !== undefined ? { pgrp, start } : undefined
}

/** One group in a ledger file. */
interface GroupEntry {
  readonly pgid: number
  readonly start: string
  readonly command: string
}

/** A ledger file: whose it is, and the groups it started that have not ended. */
interface LedgerDocument {
  readonly owner: { readonly pid: number; readonly start: string }
  readonly groups: ReadonlyArray<GroupEntry>
}

const isLedger = (value: unknown): value is LedgerDocument => {
  if (typeof value !== "object" || value === null) return false
  const { owner, groups } = value as Partial<LedgerDocument>
  return (
    typeof owner === "object" && owner !== null && Number.isInteger(owner.pid) && typeof owner.start === "string" &&
    Array.isArray(groups) &&
    groups.every((g: Partial<GroupEntry>) => Number.isInteger(g.pgid) && (g.pgid as number) > 1 && typeof g.start === "string" && typeof g.command === "string")
  )
}

/** The ledger files of the services file `servicesFile`, whoever owns them: `.<file>.processes.<pid>.<id>.json`. */
const ledgerName = (servicesFile: string) => {
  const prefix = `.${basename(servicesFile)}.processes.`
  return {
    prefix,
    matches: (name: string) => name.startsWith(prefix) && /^\d+\.[0-9a-f]{12}\.json$/.test(name.slice(prefix.length))
  }
}

/** The largest ledger read: a store's groups take far less (about 100 bytes each). */
const MAX_LEDGER_BYTES = 4 * 1024 * 1024

/**
 * A ledger's text, or undefined when it is no regular file of this process's user or is over
 * `MAX_LEDGER_BYTES` (never through a symlink): in a folder others may write to, a planted file
 * must not make a store (run as root, say) end another user's processes.
 */
const readLedger = async (path: string): Promise<string | undefined> => {
  const handle = await open(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW)
  try {
    const info = await handle.stat()
    if (!info.isFile() || info.uid !== process.getuid?.() || info.size > MAX_LEDGER_BYTES) return undefined
    return await handle.readFile("utf8")
  } finally {
    await handle.close()
  }
}

/** How long ended groups get between SIGTERM and SIGKILL, and how long the start waits for them at most. */
const REAP_GRACE_MS = 1_000

/** Whether `group` is still the group the ledger's store started. */
const stillTheSame = (group: GroupEntry): boolean => {
  const leader = procStat(group.pgid)
  if (leader !== undefined) return leader.pgrp === group.pgid && leader.start === group.start
  return groupRunning(group.pgid)
}

/**
 * Ends the groups of every ledger beside `servicesFile` whose store no longer runs, and removes those
 * ledgers. Resolves with the groups it ended, once they are gone (SIGKILL after `REAP_GRACE_MS`).
 */
export const endOrphans = async (servicesFile: string): Promise<ReadonlyArray<GroupEntry>> => {
  if (process.platform !== "linux") return []
  const dir = dirname(servicesFile)
  const { matches } = ledgerName(servicesFile)
  let names: string[]
  try {
    names = (await readdir(dir)).filter(matches)
  } catch {
    return []
  }
  const ended: GroupEntry[] = []
  for (const name of names) {
    const path = join(dir, name)
    let doc: unknown
    try {
      const text = await readLedger(path)
      if (text === undefined) {
        log.warn(`process ledger ${path} is not a file of this store's user (or is too large): left alone`, { event: "process_ledger_unreadable", file: path })
        continue
      }
      doc = JSON.parse(text)
    } catch (e) {
      // Gone meanwhile (its store stopped), or half written by a store killed while writing it: a
      // half-written file is never renamed into place, so this one is not a ledger.
      if (errnoCode(e) !== "ENOENT") log.warn(`process ledger ${path} cannot be read: left alone`, { event: "process_ledger_unreadable", file: path })
      continue
    }
    if (!isLedger(doc)) {
      log.warn(`process ledger ${path} is not one this store writes: left alone`, { event: "process_ledger_unreadable", file: path })
      continue
    }
    const owner = procStat(doc.owner.pid)
    if (owner !== undefined && owner.start === doc.owner.start) continue
    const orphans = doc.groups.filter(stillTheSame)
    for (const group of orphans) signalGroup(group.pgid, "SIGTERM")
    const deadline = Date.now() + REAP_GRACE_MS
    while (orphans.some((g) => groupRunning(g.pgid)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
    for (const group of orphans) if (groupRunning(group.pgid)) signalGroup(group.pgid, "SIGKILL")
    await rm(path, { force: true }).catch(() => undefined)
    if (orphans.length === 0) continue
    ended.push(...orphans)
    log.warn(
      `ended ${orphans.length} local service process group(s) left running by a store that ended without stopping them (pid ${doc.owner.pid}): ` +
        orphans.map((g) => `${g.command} (pid ${g.pgid})`).join(", "),
      { event: "orphan_processes_ended", owner_pid: doc.owner.pid, groups: orphans.map((g) => g.pgid) }
    )
  }
  return ended
}

/** A store's own ledger: `close` (at the store's release) removes it. */
export interface OwnProcessLedger extends ProcessLedger {
  close(): Promise<void>
}

/**
 * This store's ledger file. Changes are written in the background, coalesced (one write at a time,
 * the latest state next); a store with no group running has no file.
 */
export class ProcessLedgerFile implements OwnProcessLedger {
  readonly path: string
  readonly #owner: { readonly pid: number; readonly start: string }
  readonly #groups = new Map<number, GroupEntry>()
  #writing: Promise<void> = Promise.resolve()
  #queued = false
  #onDisk = false
  #warned = false
  #closed = false

  private constructor(servicesFile: string, ownerStart: string) {
    this.path = join(dirname(servicesFile), `${ledgerName(servicesFile).prefix}${process.pid}.${randomBytes(6).toString("hex")}.json`)
    this.#owner = { pid: process.pid, start: ownerStart }
  }

  /**
   * Ends what stores killed earlier left running beside `servicesFile`, then opens this store's
   * ledger (one that keeps nothing where /proc cannot tell a process's start time).
   */
  static async open(servicesFile: string): Promise<OwnProcessLedger> {
    const self = procStat(process.pid)
    if (self === undefined) return { ...noProcessLedger, close: async () => undefined }
    await endOrphans(servicesFile)
    return new ProcessLedgerFile(servicesFile, self.start)
  }

  started(pgid: number, command: string): void {
    const stat = procStat(pgid)
    // Ended already (nothing to end later), or not a group of its own: not noted.
    if (stat === undefined || stat.pgrp !== pgid || this.#closed) return
    this.#groups.set(pgid, { pgid, start: stat.start, command: basename(command) })
    this.#save()
  }

  ended(pgid: number): void {
    if (this.#groups.delete(pgid)) this.#save()
  }

  /** Removes the file once the last write is done (the store's groups have ended by then). */
  async close(): Promise<void> {
    this.#closed = true
    this.#groups.clear()
    this.#save()
    await this.#writing
  }

  /** Writes the current groups after the write under way (one queued write stands for every change since). */
  #save(): void {
    if (this.#queued) return
    this.#queued = true
    this.#writing = this.#writing.then(async () => {
      this.#queued = false
      try {
        if (this.#groups.size === 0) {
          if (this.#onDisk) await rm(this.path, { force: true })
          this.#onDisk = false
          return
        }
        const doc: LedgerDocument = { owner: this.#owner, groups: [...this.#groups.values()] }
        await writeAtomically(this.path, `${JSON.stringify(doc)}\n`)
        this.#onDisk = true
      } catch (e) {
        if (this.#warned) return
        this.#warned = true
        log.warn(`process ledger ${this.path} cannot be written (${(e as Error).message}): local service processes left running by a killed store will not be ended at the next start`, {
          event: "process_ledger_unwritable",
          file: this.path
        })
      }
    })
  }
}
