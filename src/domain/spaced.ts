/**
 * Notices spaced in time: the first at once, then at most one every `everyMs`, those that come in
 * between folded into one at the end of the wait (none is lost; each only says "look again"). Used
 * where an upstream may notify without bound and each notice costs the store work: its list
 * changes (a list each), its resource updates (a write to every subscribed session).
 */
export interface Spaced {
  /** A notice: told now, or at the end of the wait. */
  readonly notify: () => void
  /** Drops a notice waiting (its owner is done). */
  readonly stop: () => void
}

export const spaced = (everyMs: number, tell: () => void): Spaced => {
  let told = Number.NEGATIVE_INFINITY
  let waiting: NodeJS.Timeout | undefined
  const now = () => {
    waiting = undefined
    told = performance.now()
    tell()
  }
  return {
    notify: () => {
      if (waiting !== undefined) return
      const wait = told + everyMs - performance.now()
      if (wait <= 0) return now()
      waiting = setTimeout(now, wait)
      waiting.unref()
    },
    stop: () => {
      clearTimeout(waiting)
      waiting = undefined
    }
  }
}
