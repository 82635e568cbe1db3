"""matplotlib figures of runs and gradient values (each function takes ``ax=``)."""
