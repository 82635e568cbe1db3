"""What a cast to float16 does to values at any loss scale: exact counts at one scale, many scales
in one pass, a trace's flushed share (on the limits of :mod:`updater.common.float16`)."""
